// The contract's rules for request bodies, applied identically by every transport (single JSON,
// batch items, stream lines, binary frame items): one of policyCode/policyName, policyVersion only
// with policyName and positive, decrypt accepts data only.
import { errors } from './errors.js';

export type PolicyRef =
  | { readonly policyCode: string }
  | { readonly policyName: string; readonly policyVersion?: number };

export interface EncryptRequest<D extends string | Uint8Array = string> {
  readonly data: D;
  readonly ref: PolicyRef;
}

const DECRYPT_FORBIDDEN = ['encryptedData', 'policyCode', 'policyName', 'policyVersion'] as const;
/** A rewrap keeps the ciphertext's own policy: naming one is refused, never silently ignored. */
const REWRAP_FORBIDDEN = DECRYPT_FORBIDDEN;

function asObject(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw errors.invalid('request must be a JSON object');
  }
  return body as Record<string, unknown>;
}

function present(value: unknown): boolean {
  return value !== undefined && value !== null;
}

/** Checks the policy reference rules; shared by JSON bodies and binary frame items. */
export function checkPolicyRef(policyCode: unknown, policyName: unknown, policyVersion: unknown): PolicyRef {
  const hasCode = present(policyCode);
  const hasName = present(policyName);
  if (!hasCode && !hasName) throw errors.policyRequired();
  if (hasCode && hasName) throw errors.invalid('policyCode cannot be combined with policyName');
  if (present(policyVersion)) {
    if (!hasName) throw errors.invalid('policyVersion is used only together with policyName');
    if (
      typeof policyVersion !== 'number' ||
      !Number.isInteger(policyVersion) ||
      policyVersion < 1 ||
      policyVersion > 0xffff_ffff
    ) {
      throw errors.invalid('policyVersion must be a positive integer');
    }
  }
  if (hasCode) {
    if (typeof policyCode !== 'string' || policyCode === '')
      throw errors.invalid('policyCode must be a non-empty string');
    return { policyCode };
  }
  if (typeof policyName !== 'string' || policyName === '')
    throw errors.invalid('policyName must be a non-empty string');
  return present(policyVersion) ? { policyName, policyVersion: policyVersion as number } : { policyName };
}

export function parseEncryptRequest(body: unknown): EncryptRequest {
  const raw = asObject(body);
  const ref = checkPolicyRef(raw.policyCode, raw.policyName, raw.policyVersion);
  if (typeof raw.data !== 'string') throw errors.invalid('data must be a string');
  return { data: raw.data, ref };
}

/** Returns the ciphertext of a decrypt request body. */
export function parseDecryptRequest(body: unknown): string {
  const raw = asObject(body);
  for (const field of DECRYPT_FORBIDDEN) {
    if (raw[field] !== undefined) throw errors.decryptDataOnly();
  }
  if (typeof raw.data !== 'string') throw errors.invalid('data must be a string');
  return raw.data;
}

/** Returns the ciphertext of a rewrap request body (same shape as decrypt: data only). */
export function parseRewrapRequest(body: unknown): string {
  const raw = asObject(body);
  for (const field of REWRAP_FORBIDDEN) {
    if (raw[field] !== undefined) throw errors.rewrapDataOnly();
  }
  if (typeof raw.data !== 'string') throw errors.invalid('data must be a string');
  return raw.data;
}

export function describeRef(ref: PolicyRef): string {
  if ('policyCode' in ref) return ref.policyCode;
  return ref.policyVersion === undefined ? ref.policyName : `${ref.policyName} version ${ref.policyVersion}`;
}
