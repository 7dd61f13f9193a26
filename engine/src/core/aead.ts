// The two AEAD algorithms a policy can name. AES-256-GCM comes from node:crypto (OpenSSL);
// AES-256-SIV (RFC 5297, deterministic) from @noble/ciphers, since OpenSSL's SIV is not exposed by Node.
// Nothing here knows about policies or envelopes: bytes in, bytes out.
import { createCipheriv, createDecipheriv, createSecretKey, type KeyObject, randomFillSync } from 'node:crypto';
import { aessiv } from '@noble/ciphers/aes.js';

export const ALGORITHMS = ['AES-256-GCM', 'AES-256-SIV'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

/** Stable one-byte ids written into every ciphertext header; never renumber. */
export const ALGORITHM_IDS: Record<Algorithm, number> = { 'AES-256-GCM': 1, 'AES-256-SIV': 2 };

export const KEY_LENGTHS: Record<Algorithm, number> = { 'AES-256-GCM': 32, 'AES-256-SIV': 64 };

export const GCM_NONCE_LENGTH = 12;
export const TAG_LENGTH = 16;

export function isAlgorithm(value: unknown): value is Algorithm {
  return typeof value === 'string' && (ALGORITHMS as readonly string[]).includes(value);
}

/** A key ready for use: material imported once, never exposed again. */
export interface AeadKey {
  readonly algorithm: Algorithm;
  /** Bytes the ciphertext adds on top of the plaintext (nonce and tag). */
  readonly overhead: number;
  /** Writes `nonce? ‖ ciphertext ‖ tag` into `out` at `offset`; returns the end offset. */
  sealInto(plaintext: Uint8Array, aad: Uint8Array, out: Buffer, offset: number): number;
  /** Returns the plaintext, or null when authentication fails. */
  open(sealed: Uint8Array, aad: Uint8Array): Buffer | null;
}

// Random nonces are drawn from a pooled buffer refilled from the CSPRNG: one syscall per 4096 nonces.
const NONCE_POOL_SIZE = GCM_NONCE_LENGTH * 4096;
const noncePool = Buffer.allocUnsafe(NONCE_POOL_SIZE);
let nonceOffset = NONCE_POOL_SIZE;

function takeNonceInto(out: Buffer, offset: number): Buffer {
  if (nonceOffset === NONCE_POOL_SIZE) {
    randomFillSync(noncePool);
    nonceOffset = 0;
  }
  noncePool.copy(out, offset, nonceOffset, nonceOffset + GCM_NONCE_LENGTH);
  // Zero what was used so a nonce never lingers in the pool.
  noncePool.fill(0, nonceOffset, nonceOffset + GCM_NONCE_LENGTH);
  nonceOffset += GCM_NONCE_LENGTH;
  return out.subarray(offset, offset + GCM_NONCE_LENGTH);
}

class GcmKey implements AeadKey {
  readonly algorithm = 'AES-256-GCM' as const;
  readonly overhead = GCM_NONCE_LENGTH + TAG_LENGTH;
  readonly #key: KeyObject;

  constructor(material: Uint8Array) {
    this.#key = createSecretKey(material);
  }

  sealInto(plaintext: Uint8Array, aad: Uint8Array, out: Buffer, offset: number): number {
    const nonce = takeNonceInto(out, offset);
    const cipher = createCipheriv('aes-256-gcm', this.#key, nonce);
    cipher.setAAD(aad);
    let end = offset + GCM_NONCE_LENGTH;
    end += cipher.update(plaintext).copy(out, end);
    end += cipher.final().copy(out, end);
    return end + cipher.getAuthTag().copy(out, end);
  }

  open(sealed: Uint8Array, aad: Uint8Array): Buffer | null {
    if (sealed.length < GCM_NONCE_LENGTH + TAG_LENGTH) return null;
    const tagStart = sealed.length - TAG_LENGTH;
    const decipher = createDecipheriv('aes-256-gcm', this.#key, sealed.subarray(0, GCM_NONCE_LENGTH), {
      authTagLength: TAG_LENGTH,
    });
    decipher.setAAD(aad);
    decipher.setAuthTag(sealed.subarray(tagStart));
    const head = decipher.update(sealed.subarray(GCM_NONCE_LENGTH, tagStart));
    try {
      const tail = decipher.final();
      return tail.length === 0 ? head : Buffer.concat([head, tail]);
    } catch {
      head.fill(0);
      return null;
    }
  }
}

class SivKey implements AeadKey {
  readonly algorithm = 'AES-256-SIV' as const;
  readonly overhead = TAG_LENGTH;
  readonly #key: Uint8Array;

  constructor(material: Uint8Array) {
    this.#key = Uint8Array.from(material);
  }

  sealInto(plaintext: Uint8Array, aad: Uint8Array, out: Buffer, offset: number): number {
    const sealed = aessiv(this.#key, aad).encrypt(plaintext);
    out.set(sealed, offset);
    return offset + sealed.length;
  }

  open(sealed: Uint8Array, aad: Uint8Array): Buffer | null {
    if (sealed.length < TAG_LENGTH) return null;
    try {
      const plain = aessiv(this.#key, aad).decrypt(sealed);
      return Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength);
    } catch {
      return null;
    }
  }
}

/** Imports key material for an algorithm; throws when its length is wrong for that algorithm. */
export function importKey(algorithm: Algorithm, material: Uint8Array): AeadKey {
  if (material.length !== KEY_LENGTHS[algorithm]) {
    throw new RangeError(`${algorithm} needs a ${KEY_LENGTHS[algorithm]}-byte key`);
  }
  return algorithm === 'AES-256-GCM' ? new GcmKey(material) : new SivKey(material);
}
