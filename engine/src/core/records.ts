// Policy and key records: the shape in which policies and keys arrive (bootstrap file, hub sync) and
// are persisted. Parsing is strict and names the offending field, so a bad record is refused whole.
import { type Algorithm, isAlgorithm, KEY_LENGTHS } from './aead.js';
import { POLICY_CODE_PATTERN } from './ciphertext-envelope.js';
import { errors } from './errors.js';

export const RECORD_STATUSES = ['ACTIVE', 'DECRYPT_ONLY', 'DISABLED'] as const;
/** What a source may send. ACTIVE: encrypt and decrypt. DECRYPT_ONLY: decrypt only. DISABLED: neither (restorable). */
export type RecordStatus = (typeof RECORD_STATUSES)[number];
/**
 * What the engine holds: a source's status, or RETIRED, which the engine itself gives a record its
 * source stopped listing (a snapshot, a sync-all or a cache clear without it): decrypt only, kept in
 * the store, restored by any later sync that lists it again. Nothing but an explicit destroy erases
 * key material (DestroyedKey).
 */
export type HeldStatus = RecordStatus | 'RETIRED';

export interface PolicyRecord {
  readonly policyCode: string;
  readonly policyName: string;
  readonly policyVersion: number;
  readonly algorithm: Algorithm;
  readonly keyAlias: string;
  readonly status: HeldStatus;
}

export interface KeyRecord {
  readonly alias: string;
  readonly version: number;
  readonly algorithm: Algorithm;
  readonly status: HeldStatus;
  /** Raw key material. Held in memory only; persisted wrapped under the master key. */
  readonly material: Uint8Array;
  /** When the version entered its current status (epoch ms; set by the engine, not by a source). */
  readonly statusSince?: number;
  /** A source's minimum decryption version for the whole alias, when the record carries one. */
  readonly minDecryptionVersion?: number;
}

/** A key version whose material an operator destroyed: only its name is left, so it is never reused. */
export interface DestroyedKey {
  readonly alias: string;
  readonly version: number;
  readonly algorithm: Algorithm;
  readonly destroyedAt: number;
}

/** String.prototype.isWellFormed (Node 20+) is in the ES2024 library, beyond the ES2023 one we compile against. */
type WellFormedCheck = string & { isWellFormed(): boolean };

/**
 * A runtime version names a snapshot in logs, the store and the hub's comparisons: at most 128
 * characters of well-formed Unicode (a lone surrogate would not survive UTF-8 storage unchanged).
 */
export function runtimeVersionProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 128) return 'runtimeVersion must be a string of at most 128 characters';
  if (!(value as WellFormedCheck).isWellFormed()) return 'runtimeVersion must be well-formed Unicode (it contains a lone surrogate)';
  return undefined;
}

/** Reads raw material out of a key record's fields (base64 `material`, or a wrapped form). */
export type MaterialReader = (raw: Record<string, unknown>, where: string) => Uint8Array;

const NAME_PATTERN = /^[\x21-\x7e]{1,128}$/;
const MAX_VERSION = 0xffff_ffff;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function text(raw: Record<string, unknown>, field: string, where: string, pattern: RegExp, fallback?: string): string {
  const value = raw[field] ?? fallback;
  if (typeof value !== 'string' || !pattern.test(value)) {
    throw errors.invalid(
      `${where}: ${field} must be a string of 1 to 128 printable characters${pattern === POLICY_CODE_PATTERN ? ' (letters, digits, _ . -)' : ''}`,
    );
  }
  return value;
}

function version(raw: Record<string, unknown>, field: string, where: string, fallback?: number): number {
  const value = raw[field] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_VERSION) {
    throw errors.invalid(`${where}: ${field} must be a positive integer`);
  }
  return value;
}

function algorithm(raw: Record<string, unknown>, where: string): Algorithm {
  const value = raw.algorithm;
  if (!isAlgorithm(value)) throw errors.invalid(`${where}: algorithm must be one of AES-256-GCM, AES-256-SIV`);
  return value;
}

function status(raw: Record<string, unknown>, where: string): RecordStatus {
  const value = typeof raw.status === 'string' ? raw.status.toUpperCase() : (raw.status ?? 'ACTIVE');
  if (!(RECORD_STATUSES as readonly unknown[]).includes(value)) {
    throw errors.invalid(`${where}: status must be one of ${RECORD_STATUSES.join(', ')}`);
  }
  return value as RecordStatus;
}

export function parsePolicyRecord(raw: unknown, where: string): PolicyRecord {
  if (!isObject(raw)) throw errors.invalid(`${where}: must be an object`);
  const policyCode = text(raw, 'policyCode', where, POLICY_CODE_PATTERN);
  return {
    policyCode,
    policyName: text(raw, 'policyName', where, NAME_PATTERN, policyCode),
    policyVersion: version(raw, 'policyVersion', where, 1),
    algorithm: algorithm(raw, where),
    keyAlias: text(raw, 'keyAlias', where, NAME_PATTERN),
    status: status(raw, where),
  };
}

/** The default reader: `material` holds the raw key, base64-encoded. */
export const readRawMaterial: MaterialReader = (raw, where) => {
  const value = raw.material;
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(value)) {
    throw errors.invalid(`${where}: material must be base64`);
  }
  return Buffer.from(value, 'base64');
};

export function parseKeyRecord(raw: unknown, where: string, readMaterial: MaterialReader = readRawMaterial): KeyRecord {
  if (!isObject(raw)) throw errors.invalid(`${where}: must be an object`);
  const alg = algorithm(raw, where);
  const material = readMaterial(raw, where);
  if (material.length !== KEY_LENGTHS[alg]) {
    throw errors.invalid(`${where}: ${alg} key material must be ${KEY_LENGTHS[alg]} bytes`);
  }
  const record: KeyRecord = {
    alias: text(raw, 'alias', where, NAME_PATTERN),
    version: version(raw, 'version', where),
    algorithm: alg,
    status: status(raw, where),
    material,
  };
  if (raw.minDecryptionVersion === undefined || raw.minDecryptionVersion === null) return record;
  return { ...record, minDecryptionVersion: version(raw, 'minDecryptionVersion', where) };
}
