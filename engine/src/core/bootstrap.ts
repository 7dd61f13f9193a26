// Sources of a first snapshot without a hub: a bootstrap document (policies and keys in the record
// format, see docs/bootstrap.md) and dev mode's generated demo policies. Pure: reading and writing
// files is the caller's job.
import { randomBytes } from 'node:crypto';
import { KEY_LENGTHS } from './aead.js';
import { errors } from './errors.js';
import {
  type MaterialReader,
  parseKeyRecord,
  parsePolicyRecord,
  readRawMaterial,
  runtimeVersionProblem,
} from './records.js';
import type { SnapshotContent } from './runtime-snapshot.js';

export const DEMO_POLICIES = {
  randomized: 'DEMO_RANDOM',
  deterministic: 'DEMO_DETERMINISTIC',
} as const;

export function parseBootstrap(doc: unknown, readMaterial: MaterialReader = readRawMaterial): SnapshotContent {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw errors.invalid('bootstrap: must be a JSON object');
  const { policies, keys, runtimeVersion } = doc as Record<string, unknown>;
  if (!Array.isArray(policies) || !Array.isArray(keys))
    throw errors.invalid('bootstrap: policies and keys must be arrays');
  const problem = runtimeVersion === undefined ? undefined : runtimeVersionProblem(runtimeVersion);
  if (problem) throw errors.invalid(`bootstrap: ${problem}`);
  return {
    policies: policies.map((p, i) => parsePolicyRecord(p, `policies[${i}]`)),
    keys: keys.map((k, i) => parseKeyRecord(k, `keys[${i}]`, readMaterial)),
    runtimeVersion: (runtimeVersion as string | undefined) ?? 'bootstrap',
  };
}

/**
 * A bootstrap document with one randomized and one deterministic demo policy and fresh keys under
 * `version`: the caller picks a version never used before, so a ciphertext made under an earlier demo
 * key never meets a different key under the same version.
 */
export function generateDevBootstrap(version = 1): Record<string, unknown> {
  return {
    runtimeVersion: 'dev',
    policies: [
      {
        policyCode: DEMO_POLICIES.randomized,
        policyName: 'demo-random',
        policyVersion: 1,
        algorithm: 'AES-256-GCM',
        keyAlias: 'demo-gcm',
        status: 'ACTIVE',
      },
      {
        policyCode: DEMO_POLICIES.deterministic,
        policyName: 'demo-deterministic',
        policyVersion: 1,
        algorithm: 'AES-256-SIV',
        keyAlias: 'demo-siv',
        status: 'ACTIVE',
      },
    ],
    keys: [
      {
        alias: 'demo-gcm',
        version,
        algorithm: 'AES-256-GCM',
        status: 'ACTIVE',
        material: randomBytes(KEY_LENGTHS['AES-256-GCM']).toString('base64'),
      },
      {
        alias: 'demo-siv',
        version,
        algorithm: 'AES-256-SIV',
        status: 'ACTIVE',
        material: randomBytes(KEY_LENGTHS['AES-256-SIV']).toString('base64'),
      },
    ],
  };
}
