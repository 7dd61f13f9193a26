// A bootstrap document with fixed keys for end-to-end tests: ciphertexts stay decryptable across engine
// restarts, and both algorithms are covered. The key bytes are test-only constants, never real secrets.
export const POLICIES = {
  /** AES-256-GCM (randomized). */
  random: 'PII_EMAIL',
  /** AES-256-SIV (deterministic: equality search). */
  deterministic: 'PII_EMAIL_DET',
  /** Two versions under one name, for encrypt-by-name. */
  namedV1: 'PII_PHONE_V1',
  namedV2: 'PII_PHONE_V2',
} as const;

export const POLICY_NAME = 'pii-phone';

const fill = (length: number, byte: number) => Buffer.alloc(length, byte).toString('base64');

export function testBootstrap(): Record<string, unknown> {
  return {
    runtimeVersion: 'integration-tests',
    policies: [
      {
        policyCode: POLICIES.random,
        policyName: 'pii-email',
        policyVersion: 1,
        algorithm: 'AES-256-GCM',
        keyAlias: 'it-gcm',
        status: 'ACTIVE',
      },
      {
        policyCode: POLICIES.deterministic,
        policyName: 'pii-email-det',
        policyVersion: 1,
        algorithm: 'AES-256-SIV',
        keyAlias: 'it-siv',
        status: 'ACTIVE',
      },
      {
        policyCode: POLICIES.namedV1,
        policyName: POLICY_NAME,
        policyVersion: 1,
        algorithm: 'AES-256-GCM',
        keyAlias: 'it-gcm',
        status: 'ACTIVE',
      },
      {
        policyCode: POLICIES.namedV2,
        policyName: POLICY_NAME,
        policyVersion: 2,
        algorithm: 'AES-256-GCM',
        keyAlias: 'it-gcm',
        status: 'ACTIVE',
      },
    ],
    keys: [
      { alias: 'it-gcm', version: 1, algorithm: 'AES-256-GCM', status: 'ACTIVE', material: fill(32, 0x11) },
      { alias: 'it-siv', version: 1, algorithm: 'AES-256-SIV', status: 'ACTIVE', material: fill(64, 0x22) },
    ],
  };
}
