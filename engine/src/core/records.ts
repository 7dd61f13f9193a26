// Policy and key records: the shape in which policies and keys arrive (bootstrap file, hub sync) and
// are persisted. Parsing is strict and names the offending field, so a bad record is refused whole.
import { type Algorithm, isAlgorithm, KEY_LENGTHS } from './aead.js';
import { POLICY_CODE_PATTERN } from './ciphertext-envelope.js';
import { errors } from './errors.js';

export const RECORD_STATUSES = ['ACTIVE', 'DECRYPT_ONLY', 'DISABLED'] as const;
/** ACTIVE: encrypt and decrypt. DECRYPT_ONLY: decrypt only. DISABLED: neither. */
export type RecordStatus = (typeof RECORD_STATUSES)[number];

export interface PolicyRecord {
  readonly policyCode: string;
  readonly policyName: string;
  readonly policyVersion: number;
  readonly algorithm: Algorithm;
  readonly keyAlias: string;
  readonly status: RecordStatus;
}

export interface KeyRecord {
  readonly alias: string;
  readonly version: number;
  readonly algorithm: Algorithm;
  readonly status: RecordStatus;
  /** Raw key material. Held in memory only; persisted wrapped under the master key. */
  readonly material: Uint8Array;
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
  return {
    alias: text(raw, 'alias', where, NAME_PATTERN),
    version: version(raw, 'version', where),
    algorithm: alg,
    status: status(raw, where),
    material,
  };
}
