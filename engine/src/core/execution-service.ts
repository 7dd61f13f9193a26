// The execution service: the one place where requests become ciphertexts and back. Every transport
// (JSON single and batch, NDJSON stream, binary frame) calls these methods and only adapts formats.

import { type Algorithm, ALGORITHM_IDS, GCM_NONCE_LENGTH, TAG_LENGTH } from './aead.js';
import type { AuditContext, AuditOperation, AuditTrail } from './audit.js';
import {
  associatedData,
  ENVELOPE_PREFIX,
  encodeHeader,
  envelopeKeyVersion,
  envelopePolicyCode,
  formatEnvelope,
  HEADER_LENGTH,
  MAX_POLICY_CODE_LENGTH,
  parseEnvelope,
} from './ciphertext-envelope.js';
import { EngineError, errors } from './errors.js';
import { decryptableVersions } from './key-rules.js';
import {
  checkPolicyRef,
  describeRef,
  type EncryptRequest,
  type PolicyRef,
  parseDecryptRequest,
  parseEncryptRequest,
  parseRewrapRequest,
} from './request-validation.js';
import type { RuntimeCache } from './runtime-cache.js';
import type { RuntimeSnapshot } from './runtime-snapshot.js';

export interface ExecutionLimits {
  /** Items in one batch (JSON or binary frame). */
  readonly maxBatchItems: number;
  /** Bytes of one item's plaintext; on decrypt, the ciphertext may be as long as the envelope of such a plaintext. */
  readonly maxDataBytes: number;
}

export interface ItemSuccess {
  readonly ok: true;
  readonly policyCode: string;
  readonly data: string;
}

export interface ItemFailure {
  readonly ok: false;
  readonly policyCode?: string;
  readonly error: EngineError;
}

export type ItemOutcome = ItemSuccess | ItemFailure;

/** A binary-frame encrypt item: raw bytes and the policy reference fields, checked like a JSON body's. */
export interface RawBytesItem {
  readonly data: Uint8Array;
  readonly policyCode?: string;
  readonly policyName?: string;
  readonly policyVersion?: number;
}

export interface DecryptedBytes {
  readonly policyCode: string;
  readonly plaintext: Buffer;
}

/** One ciphertext per key version that can still decrypt, newest first (docs/rotation.md). */
export interface EqualityTerms {
  readonly policyCode: string;
  readonly terms: string[];
  readonly keyVersions: number[];
}

/** Most key versions equality terms cover: each is one more value in `col = ANY(...)`. */
export const MAX_EQUALITY_TERMS = 16;

const DETERMINISTIC: ReadonlySet<Algorithm> = new Set<Algorithm>(['AES-256-SIV']);

// ignoreBOM: a plaintext may begin with U+FEFF, and it is data; the default decoder would drop it.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// Sealed bytes only live until they are base64-encoded, synchronously: one reusable buffer saves an
// allocation per item on the hot path. It only ever holds ciphertext, never plaintext or keys.
let scratchBuffer = Buffer.allocUnsafe(64 * 1024);
function scratch(size: number): Buffer {
  if (scratchBuffer.length < size) scratchBuffer = Buffer.allocUnsafe(Math.max(size, scratchBuffer.length * 2));
  return scratchBuffer;
}

/** String.prototype.isWellFormed (Node 20+) is in the ES2024 library, beyond the ES2023 one we compile against. */
type WellFormedCheck = string & { isWellFormed(): boolean };

/**
 * The longest envelope encrypt can return for a plaintext of `maxDataBytes`: decrypt must accept every
 * ciphertext the engine itself produced, so the ciphertext limit is derived from the plaintext limit
 * (longest policy code, header, nonce and tag, base64url expansion) rather than equal to it.
 */
function maxEnvelopeLength(maxDataBytes: number): number {
  const body = HEADER_LENGTH + GCM_NONCE_LENGTH + TAG_LENGTH + maxDataBytes;
  return ENVELOPE_PREFIX.length + MAX_POLICY_CODE_LENGTH + 1 + Math.ceil((body * 4) / 3);
}

function toFailure(error: unknown, policyCode?: string): ItemFailure {
  if (error instanceof EngineError) return { ok: false, policyCode, error };
  throw error;
}

export class ExecutionService {
  constructor(
    /** The runtime cache, or one snapshot held still (a batch processed in slices sees one view). */
    readonly cache: Pick<RuntimeCache, 'current'>,
    readonly limits: ExecutionLimits,
    /** Where transports record their calls (docs/audit.md); absent: nothing is audited. */
    readonly audit?: AuditTrail,
  ) {}

  /** The current snapshot, or the 503 the contract prescribes when nothing is loaded. */
  snapshot(): RuntimeSnapshot {
    const snapshot = this.cache.current;
    if (!snapshot.configured) throw errors.notConfigured();
    return snapshot;
  }

  checkBatchSize(count: number): void {
    if (count > this.limits.maxBatchItems) {
      throw errors.tooManyItems(count, this.limits.maxBatchItems);
    }
  }

  /** Encrypts one item's bytes (or UTF-8 text) under a policy reference; returns the envelope. */
  encryptData(snapshot: RuntimeSnapshot, ref: PolicyRef, data: string | Uint8Array): ItemSuccess {
    // UTF-8 cannot carry a lone surrogate: encoding would silently turn it into U+FFFD, so the value
    // would not decrypt to what was sent (and under SIV would collide with the real U+FFFD).
    if (typeof data === 'string' && !(data as WellFormedCheck).isWellFormed()) {
      throw errors.invalid('data must be valid Unicode text (it contains a lone surrogate)');
    }
    const plaintext = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    if (plaintext.length > this.limits.maxDataBytes) {
      throw errors.tooLarge(`data exceeds ${this.limits.maxDataBytes} bytes`);
    }
    const policy =
      'policyCode' in ref
        ? snapshot.policyByCode(ref.policyCode)
        : snapshot.policyByName(ref.policyName, ref.policyVersion);
    if (!policy) throw errors.policyNotFound(describeRef(ref));
    const context = snapshot.encryptContext(policy);
    if (context instanceof EngineError) throw context;
    const { key, header, aad } = context;
    const body = scratch(HEADER_LENGTH + plaintext.length + key.aead.overhead);
    header.copy(body, 0);
    const end = key.aead.sealInto(plaintext, aad, body, HEADER_LENGTH);
    key.usage.encryptions++;
    return { ok: true, policyCode: policy.policyCode, data: formatEnvelope(policy.policyCode, body.subarray(0, end)) };
  }

  /** Decrypts an envelope to bytes, resolving the policy and key version it names. */
  decryptData(snapshot: RuntimeSnapshot, ciphertext: string): DecryptedBytes {
    if (ciphertext.length > maxEnvelopeLength(this.limits.maxDataBytes)) {
      throw errors.tooLarge(`data exceeds ${this.limits.maxDataBytes} bytes`);
    }
    const envelope = parseEnvelope(ciphertext);
    const policy = snapshot.policyByCode(envelope.policyCode);
    if (!policy) throw errors.policyNotFound(envelope.policyCode);
    if (policy.status === 'DISABLED') throw errors.policyNotUsable(policy.policyCode, 'is disabled');
    // Which key states may decrypt is the snapshot's rule (RETIRED yes; DISABLED, destroyed, below minimum no).
    const key = snapshot.decryptKey(policy.keyAlias, envelope.keyVersion);
    if (key instanceof EngineError) throw key;
    if (ALGORITHM_IDS[key.aead.algorithm] !== envelope.algorithmId) throw errors.decryptionFailed();
    const plaintext = key.aead.open(envelope.sealed, envelope.aad);
    if (!plaintext) throw errors.decryptionFailed();
    key.usage.decryptions++;
    return { policyCode: policy.policyCode, plaintext };
  }

  /** Decrypts an envelope whose plaintext must be text (the JSON transports). */
  decryptText(snapshot: RuntimeSnapshot, ciphertext: string): ItemSuccess {
    const { policyCode, plaintext } = this.decryptData(snapshot, ciphertext);
    try {
      return { ok: true, policyCode, data: utf8.decode(plaintext) };
    } catch {
      throw errors.notUtf8();
    }
  }

  encryptOne(body: unknown): ItemSuccess {
    const request = parseEncryptRequest(body);
    return this.encryptData(this.snapshot(), request.ref, request.data);
  }

  decryptOne(body: unknown): ItemSuccess {
    const ciphertext = parseDecryptRequest(body);
    return this.decryptText(this.snapshot(), ciphertext);
  }

  /** Each item is validated and encrypted on its own; results keep the request order. */
  encryptMany(items: readonly unknown[]): ItemOutcome[] {
    this.checkBatchSize(items.length);
    const snapshot = this.snapshot();
    const out = new Array<ItemOutcome>(items.length);
    for (let i = 0; i < items.length; i++) {
      let request: EncryptRequest | undefined;
      try {
        request = parseEncryptRequest(items[i]);
        out[i] = this.encryptData(snapshot, request.ref, request.data);
      } catch (error) {
        out[i] = toFailure(error, request && 'policyCode' in request.ref ? request.ref.policyCode : undefined);
      }
    }
    return out;
  }

  decryptMany(items: readonly unknown[]): ItemOutcome[] {
    this.checkBatchSize(items.length);
    const snapshot = this.snapshot();
    const out = new Array<ItemOutcome>(items.length);
    for (let i = 0; i < items.length; i++) {
      try {
        out[i] = this.decryptText(snapshot, parseDecryptRequest(items[i]));
      } catch (error) {
        out[i] = toFailure(error, envelopePolicyCode((items[i] as { data?: unknown } | null)?.data));
      }
    }
    return out;
  }

  /** Binary frame items: plaintext bytes in, envelopes out (or bytes out on decrypt), one outcome per item. */
  encryptBytesMany(items: readonly RawBytesItem[]): ItemOutcome[] {
    this.checkBatchSize(items.length);
    const snapshot = this.snapshot();
    return items.map((item) => {
      try {
        return this.encryptData(
          snapshot,
          checkPolicyRef(item.policyCode, item.policyName, item.policyVersion),
          item.data,
        );
      } catch (error) {
        return toFailure(error, item.policyCode);
      }
    });
  }

  decryptBytesMany(ciphertexts: readonly string[]): (DecryptedBytes | ItemFailure)[] {
    this.checkBatchSize(ciphertexts.length);
    const snapshot = this.snapshot();
    return ciphertexts.map((ciphertext) => {
      try {
        return this.decryptData(snapshot, ciphertext);
      } catch (error) {
        return toFailure(error, envelopePolicyCode(ciphertext));
      }
    });
  }

  /**
   * Moves a ciphertext to the newest ACTIVE key version of its own policy's key; the plaintext stays
   * in this function. A ciphertext already under that version comes back unchanged, but only after it
   * decrypted (so a tampered one is refused, as on decrypt).
   */
  rewrapData(snapshot: RuntimeSnapshot, ciphertext: string): ItemSuccess {
    const { policyCode, plaintext } = this.decryptData(snapshot, ciphertext);
    try {
      const policy = snapshot.policyByCode(policyCode);
      if (!policy) throw errors.policyNotFound(policyCode);
      const context = snapshot.encryptContext(policy);
      if (context instanceof EngineError) throw context;
      // It decrypted, so its header (and the key version in it) is authentic.
      if (context.key.version === envelopeKeyVersion(ciphertext)) return { ok: true, policyCode, data: ciphertext };
      return this.encryptData(snapshot, { policyCode }, plaintext);
    } finally {
      plaintext.fill(0);
    }
  }

  rewrapOne(body: unknown): ItemSuccess {
    return this.rewrapData(this.snapshot(), parseRewrapRequest(body));
  }

  /** Items shaped like decrypt items (`{data}`); one outcome per item, in order. */
  rewrapMany(items: readonly unknown[]): ItemOutcome[] {
    this.checkBatchSize(items.length);
    const snapshot = this.snapshot();
    const out = new Array<ItemOutcome>(items.length);
    for (let i = 0; i < items.length; i++) {
      try {
        out[i] = this.rewrapData(snapshot, parseRewrapRequest(items[i]));
      } catch (error) {
        out[i] = toFailure(error, envelopePolicyCode((items[i] as { data?: unknown } | null)?.data));
      }
    }
    return out;
  }

  /** Binary frame rewrap items: bare ciphertexts (no fields to refuse). */
  rewrapCiphertexts(ciphertexts: readonly string[]): ItemOutcome[] {
    this.checkBatchSize(ciphertexts.length);
    const snapshot = this.snapshot();
    return ciphertexts.map((ciphertext) => {
      try {
        return this.rewrapData(snapshot, ciphertext);
      } catch (error) {
        return toFailure(error, envelopePolicyCode(ciphertext));
      }
    });
  }

  /**
   * The ciphertexts of one value under every key version of a deterministic policy's key that can
   * still decrypt, newest first: what `col = ANY(...)` needs to find rows written before a rotation.
   * Needs the right to encrypt under the policy (its newest term is an ordinary encryption).
   */
  equalityTerms(ref: PolicyRef, value: string): EqualityTerms {
    const snapshot = this.snapshot();
    const policy =
      'policyCode' in ref ? snapshot.policyByCode(ref.policyCode) : snapshot.policyByName(ref.policyName, ref.policyVersion);
    if (!policy) throw errors.policyNotFound(describeRef(ref));
    if (!DETERMINISTIC.has(policy.algorithm)) throw errors.notDeterministic(policy.policyCode);
    const newest = this.encryptData(snapshot, { policyCode: policy.policyCode }, value);
    const newestVersion = envelopeKeyVersion(newest.data) ?? 0;
    const older = decryptableVersions(snapshot, policy.keyAlias).filter(
      (k) => k.version !== newestVersion && k.aead.algorithm === policy.algorithm,
    );
    if (older.length + 1 > MAX_EQUALITY_TERMS) {
      throw errors.tooManyKeyVersions(policy.policyCode, older.length + 1, MAX_EQUALITY_TERMS);
    }
    const plaintext = Buffer.from(value, 'utf8');
    const terms = [newest.data];
    const keyVersions = [newestVersion];
    for (const key of older) {
      const header = encodeHeader(ALGORITHM_IDS[policy.algorithm], key.version);
      const body = Buffer.alloc(HEADER_LENGTH + plaintext.length + key.aead.overhead);
      header.copy(body, 0);
      const end = key.aead.sealInto(plaintext, associatedData(policy.policyCode, header), body, HEADER_LENGTH);
      key.usage.encryptions++;
      terms.push(formatEnvelope(policy.policyCode, body.subarray(0, end)));
      keyVersions.push(key.version);
    }
    plaintext.fill(0);
    return { policyCode: policy.policyCode, terms, keyVersions };
  }

  /**
   * Runs one call of a transport that has no hook of its own (the PostgreSQL wire endpoint) and
   * records one audit event for it; without an audit trail it only runs the call.
   */
  audited<T extends ItemOutcome | ItemOutcome[]>(
    context: AuditContext,
    operation: AuditOperation,
    run: () => T,
    inputs?: readonly unknown[],
  ): T {
    return this.audit ? this.audit.run(context, operation, run, inputs) : run();
  }

  /** audited() for a call that answers later (a batch on the crypto workers). */
  auditedAsync<T extends ItemOutcome[]>(
    context: AuditContext,
    operation: AuditOperation,
    run: () => Promise<T>,
    inputs?: readonly unknown[],
  ): Promise<T> {
    return this.audit ? this.audit.runAsync(context, operation, run, inputs) : run();
  }
}
