// The ciphertext envelope: `hub:<policy_code>:<rest>`, where <rest> is unpadded URL-safe base64 of
//   header (6 bytes) ‖ sealed bytes
//   header = format version (u8, 1) ‖ algorithm id (u8) ‖ key version (u32, big-endian)
// The associated data is `hub:<policy_code>:` followed by the header, so moving a ciphertext to
// another policy, or editing its key version or algorithm, fails authentication.
// This module only encodes and parses; it never decrypts.
import { errors } from './errors.js';

export const ENVELOPE_PREFIX = 'hub:';
export const FORMAT_VERSION = 1;
export const HEADER_LENGTH = 6;

/** Policy codes are the envelope's second field, so they may not contain ':' (or anything outside this set). */
export const POLICY_CODE_PATTERN = /^[A-Za-z0-9_.-]{1,128}$/;
/** The upper bound in POLICY_CODE_PATTERN; keep the two in step. */
export const MAX_POLICY_CODE_LENGTH = 128;
const BASE64URL_PATTERN = /^[A-Za-z0-9_-]+$/;

export interface EnvelopeHeader {
  readonly formatVersion: number;
  readonly algorithmId: number;
  readonly keyVersion: number;
}

export interface ParsedEnvelope extends EnvelopeHeader {
  readonly policyCode: string;
  /** `hub:<code>:` ‖ header: the associated data the ciphertext was sealed with. */
  readonly aad: Buffer;
  readonly sealed: Buffer;
}

export function encodeHeader(algorithmId: number, keyVersion: number): Buffer {
  const header = Buffer.alloc(HEADER_LENGTH);
  header.writeUInt8(FORMAT_VERSION, 0);
  header.writeUInt8(algorithmId, 1);
  header.writeUInt32BE(keyVersion, 2);
  return header;
}

/** The associated data for a policy code and header. */
export function associatedData(policyCode: string, header: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${ENVELOPE_PREFIX}${policyCode}:`, 'latin1'), header]);
}

/** `aad` from associatedData(); `body` = header ‖ sealed bytes. */
export function formatEnvelope(policyCode: string, body: Buffer): string {
  return `${ENVELOPE_PREFIX}${policyCode}:${body.toString('base64url')}`;
}

/** The policy code a string names when it has the envelope's outer shape (to report a failed decrypt's policy). */
export function envelopePolicyCode(value: unknown): string | undefined {
  if (typeof value !== 'string' || !value.startsWith(ENVELOPE_PREFIX)) return undefined;
  const end = value.indexOf(':', ENVELOPE_PREFIX.length);
  const code = end < 0 ? '' : value.slice(ENVELOPE_PREFIX.length, end);
  return POLICY_CODE_PATTERN.test(code) ? code : undefined;
}

/**
 * The key version in an envelope's header, read from its first 8 base64url characters (the 6 header
 * bytes) without parsing the rest; undefined when the value is not in envelope shape. Not a check:
 * only a ciphertext that decrypted has an authentic header.
 */
export function envelopeKeyVersion(value: unknown): number | undefined {
  if (typeof value !== 'string' || !value.startsWith(ENVELOPE_PREFIX)) return undefined;
  const end = value.indexOf(':', ENVELOPE_PREFIX.length);
  if (end < 0) return undefined;
  const head = Buffer.from(value.slice(end + 1, end + 9), 'base64url');
  return head.length === HEADER_LENGTH ? head.readUInt32BE(2) : undefined;
}

/** Parses an envelope; any deviation from the canonical encoding is `malformed ciphertext`. */
export function parseEnvelope(value: string): ParsedEnvelope {
  if (!value.startsWith(ENVELOPE_PREFIX)) throw errors.malformedCiphertext();
  const end = value.indexOf(':', ENVELOPE_PREFIX.length);
  if (end < 0) throw errors.malformedCiphertext();
  const policyCode = value.slice(ENVELOPE_PREFIX.length, end);
  const rest = value.slice(end + 1);
  if (!POLICY_CODE_PATTERN.test(policyCode) || !BASE64URL_PATTERN.test(rest)) throw errors.malformedCiphertext();
  const body = Buffer.from(rest, 'base64url');
  // Node's decoder tolerates non-canonical trailing bits; re-encoding makes every text change matter.
  if (body.length <= HEADER_LENGTH || body.toString('base64url') !== rest) throw errors.malformedCiphertext();
  const formatVersion = body.readUInt8(0);
  if (formatVersion !== FORMAT_VERSION) throw errors.malformedCiphertext();
  const header = body.subarray(0, HEADER_LENGTH);
  return {
    policyCode,
    formatVersion,
    algorithmId: body.readUInt8(1),
    keyVersion: body.readUInt32BE(2),
    aad: associatedData(policyCode, header),
    sealed: body.subarray(HEADER_LENGTH),
  };
}
