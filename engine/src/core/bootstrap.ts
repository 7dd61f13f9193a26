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

/** The parser's position of a syntax error, when its message gives one. */
function reportedPosition(message: string): number | undefined {
  const match = / in JSON at position (\d+)/.exec(message);
  return match ? Number(match[1]) : undefined;
}

/** Whether a prefix of a JSON text is only unfinished (it could still become valid) rather than wrong. */
function isUnfinished(prefix: string): boolean {
  try {
    JSON.parse(prefix);
    return true;
  } catch (error) {
    const message = (error as Error).message;
    const position = reportedPosition(message);
    return position !== undefined
      ? position >= prefix.length
      : message.startsWith('Unexpected end') || message.startsWith('Unterminated string');
  }
}

/** The first wrong character: a wrong prefix stays wrong when extended, so binary search applies. */
function firstWrongCharacter(text: string): number {
  let good = 0;
  let bad = text.length;
  while (bad - good > 1) {
    const mid = (good + bad) >>> 1;
    if (isUnfinished(text.slice(0, mid))) good = mid;
    else bad = mid;
  }
  return good;
}

/**
 * Where and why a JSON text does not parse: `line L, column C: <reason>`, or undefined when it parses.
 * The text is never quoted (a bootstrap file holds raw keys): the position is the parser's when it
 * reports one, else found by search, and the reason is the parser's own only when it quotes nothing.
 */
export function describeJsonError(text: string): string | undefined {
  let message: string;
  try {
    JSON.parse(text);
    return undefined;
  } catch (error) {
    message = (error as Error).message;
  }
  const unfinished = message.startsWith('Unexpected end');
  const at = reportedPosition(message) ?? (unfinished ? text.length : firstWrongCharacter(text));
  const before = text.slice(0, at);
  const line = before.split('\n').length;
  const column = at - before.lastIndexOf('\n');
  const reason =
    /^(.*) in JSON at position \d+/.exec(message)?.[1]?.toLowerCase() ??
    (unfinished ? 'unexpected end of the text' : 'unexpected character');
  const hint =
    text[at] === '\n' || text[at] === '\r'
      ? ' (a line break inside a string: keep each base64 key on one line, e.g. openssl base64 -A)'
      : '';
  return `line ${line}, column ${column}: ${reason}${hint}`;
}

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
