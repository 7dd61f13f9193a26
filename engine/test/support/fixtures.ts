// Test keys and policies, and a way to stand up an ExecutionService over them without any transport.
// The keys are fixed and public: test material only, never used outside the tests.
import type { Algorithm } from '../../src/core/aead.js';
import { type ExecutionLimits, ExecutionService } from '../../src/core/execution-service.js';
import type { KeyRecord, PolicyRecord, RecordStatus } from '../../src/core/records.js';
import { RuntimeCache } from '../../src/core/runtime-cache.js';

export const GCM_KEY_V1 = '000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f';
export const GCM_KEY_V2 = '202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f';
export const SIV_KEY_V1 =
  '404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f';

export const DEFAULT_LIMITS: ExecutionLimits = { maxBatchItems: 1000, maxDataBytes: 1024 * 1024 };

export function key(
  alias: string,
  version: number,
  algorithm: Algorithm,
  materialHex: string,
  status: RecordStatus = 'ACTIVE',
): KeyRecord {
  return { alias, version, algorithm, status, material: Buffer.from(materialHex, 'hex') };
}

export function policy(
  policyCode: string,
  algorithm: Algorithm,
  keyAlias: string,
  options: { policyName?: string; policyVersion?: number; status?: RecordStatus } = {},
): PolicyRecord {
  return {
    policyCode,
    policyName: options.policyName ?? policyCode,
    policyVersion: options.policyVersion ?? 1,
    algorithm,
    keyAlias,
    status: options.status ?? 'ACTIVE',
  };
}

/** Two policies on each of one GCM and one SIV key (to move ciphertexts between them), and a named policy in two versions. */
export function standardContent(): { policies: PolicyRecord[]; keys: KeyRecord[] } {
  return {
    policies: [
      policy('PII_GCM', 'AES-256-GCM', 'test-gcm'),
      policy('PII_GCM_OTHER', 'AES-256-GCM', 'test-gcm'),
      policy('PII_SIV', 'AES-256-SIV', 'test-siv'),
      policy('PII_SIV_OTHER', 'AES-256-SIV', 'test-siv'),
      policy('CUSTOMER_V1', 'AES-256-GCM', 'test-gcm', { policyName: 'customer', policyVersion: 1 }),
      policy('CUSTOMER_V2', 'AES-256-SIV', 'test-siv', { policyName: 'customer', policyVersion: 2 }),
    ],
    keys: [key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1), key('test-siv', 1, 'AES-256-SIV', SIV_KEY_V1)],
  };
}

export function serviceWith(
  content: { policies: readonly PolicyRecord[]; keys: readonly KeyRecord[] } = standardContent(),
  limits: ExecutionLimits = DEFAULT_LIMITS,
): { service: ExecutionService; cache: RuntimeCache } {
  const cache = new RuntimeCache();
  cache.replace({ ...content, runtimeVersion: 'test' });
  return { service: new ExecutionService(cache, limits), cache };
}
