// AES key wrap with padding (RFC 5649) under a 256-bit key-encryption key, through OpenSSL's
// `id-aes256-wrap-pad`. The snapshot store keeps key material only in this wrapped form.
// Unwrapping authenticates (the RFC's integrity check), so a wrong KEK or an edited blob yields null.
import { createCipheriv, createDecipheriv } from 'node:crypto';

const CIPHER = 'id-aes256-wrap-pad';
/** RFC 5649 section 3: the alternative initial value's fixed 32-bit prefix. */
const AIV = Buffer.from('A65959A6', 'hex');
export const KEK_LENGTH = 32;

function checkKek(kek: Uint8Array): void {
  if (kek.length !== KEK_LENGTH) throw new RangeError(`the key-encryption key must be ${KEK_LENGTH} bytes`);
}

/** Wraps key material (1 byte or more); the result is 8 to 15 bytes longer than the input. */
export function wrapKey(kek: Uint8Array, material: Uint8Array): Buffer {
  checkKek(kek);
  if (material.length === 0) throw new RangeError('cannot wrap empty key material');
  const cipher = createCipheriv(CIPHER, kek, AIV);
  return Buffer.concat([cipher.update(material), cipher.final()]);
}

/** Unwraps and checks integrity; returns null for anything that is not a valid wrapping under this KEK. */
export function unwrapKey(kek: Uint8Array, wrapped: Uint8Array): Buffer | null {
  checkKek(kek);
  // RFC 5649 section 4.2: at least two 64-bit blocks, a whole number of blocks.
  if (wrapped.length < 16 || wrapped.length % 8 !== 0) return null;
  try {
    const decipher = createDecipheriv(CIPHER, kek, AIV);
    return Buffer.concat([decipher.update(wrapped), decipher.final()]);
  } catch {
    return null;
  }
}
