// Known-answer tests for the primitives under every policy: RFC vectors embedded here, and the
// Project Wycheproof files read from the shared vectors folder (see support/wycheproof.ts).
import { aessiv } from '@noble/ciphers/aes.js';
import { describe, expect, it } from 'vitest';
import { type AeadKey, importKey } from '../src/core/aead.js';
import { unwrapKey, wrapKey } from '../src/core/key-wrap.js';
import { type AeadCase, type DaeadCase, hex, type KeywrapCase, loadWycheproof } from './support/wycheproof.js';

function seal(key: AeadKey, plaintext: Uint8Array, aad: Uint8Array): Buffer {
  const out = Buffer.alloc(plaintext.length + key.overhead);
  const end = key.sealInto(plaintext, aad, out, 0);
  return out.subarray(0, end);
}

describe('RFC 5297 A.1 (deterministic AES-SIV)', () => {
  const key = hex('fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff');
  const ad = hex('101112131415161718191a1b1c1d1e1f2021222324252627');
  const plaintext = hex('112233445566778899aabbccddee');
  const output = hex('85632d07c6e8f37f950acd320a2ecc9340c02b9690c4dc04daef7f6afe5c');

  // The RFC's vector uses a 256-bit key (AES-128-SIV); our policies use 512-bit keys through the same
  // call, aessiv(key, aad) with the associated data as one component, so this pins that call's meaning.
  it('encrypts to the published output with the associated data as one component', () => {
    expect(Buffer.from(aessiv(key, ad).encrypt(plaintext))).toEqual(output);
  });

  it('decrypts the published output and rejects it under other associated data', () => {
    expect(Buffer.from(aessiv(key, ad).decrypt(output))).toEqual(plaintext);
    expect(() => aessiv(key, hex('00')).decrypt(output)).toThrow();
  });
});

describe('AES-256-GCM test case 16 of the GCM specification (with AAD)', () => {
  const key = importKey('AES-256-GCM', hex('feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308'));
  const iv = hex('cafebabefacedbaddecaf888');
  const aad = hex('feedfacedeadbeeffeedfacedeadbeefabaddad2');
  const plaintext = hex(
    'd9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39',
  );
  const ciphertext = hex(
    '522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662',
  );
  const tag = hex('76fc6ece0f4e1768cddf8853bb2d551b');
  const sealed = Buffer.concat([iv, ciphertext, tag]);

  it('opens nonce ‖ ciphertext ‖ tag to the published plaintext', () => {
    expect(key.open(sealed, aad)).toEqual(plaintext);
  });

  it('rejects the vector under different AAD, and with a changed tag byte', () => {
    expect(key.open(sealed, aad.subarray(1))).toBeNull();
    const edited = Buffer.from(sealed);
    edited[edited.length - 1] = (edited[edited.length - 1] ?? 0) ^ 1;
    expect(key.open(edited, aad)).toBeNull();
  });

  it('seals with a fresh 96-bit nonce each time, and what it seals opens again', () => {
    const first = seal(key, plaintext, aad);
    const second = seal(key, plaintext, aad);
    expect(first.length).toBe(12 + plaintext.length + 16);
    expect(first.subarray(0, 12)).not.toEqual(second.subarray(0, 12));
    expect(key.open(first, aad)).toEqual(plaintext);
    expect(key.open(second, aad)).toEqual(plaintext);
  });
});

describe('importKey', () => {
  it('refuses material of the wrong length for the algorithm', () => {
    expect(() => importKey('AES-256-GCM', Buffer.alloc(64))).toThrow(RangeError);
    expect(() => importKey('AES-256-SIV', Buffer.alloc(32))).toThrow(RangeError);
  });
});

// Only the groups with our parameters are exercised: a 256-bit key, 96-bit IV and 128-bit tag is what
// every AES-256-GCM policy uses. The other groups (other key sizes, IV lengths from 0 to 2056 bits)
// describe parameters the engine cannot express, so their `invalid` cases are outside our scope.
describe('Wycheproof aes_gcm_test.json, 256-bit key / 96-bit IV / 128-bit tag groups', () => {
  it('opens every valid case to its message and rejects every invalid case', () => {
    const file = loadWycheproof<AeadCase>('aes_gcm_test.json');
    const groups = file.testGroups.filter((g) => g.keySize === 256 && g.ivSize === 96 && g.tagSize === 128);
    const failures: string[] = [];
    const counts = { valid: 0, invalid: 0 };
    for (const group of groups) {
      for (const t of group.tests) {
        const key = importKey('AES-256-GCM', hex(t.key));
        const sealed = Buffer.concat([hex(t.iv), hex(t.ct), hex(t.tag)]);
        const opened = key.open(sealed, hex(t.aad));
        if (t.result === 'valid') {
          counts.valid++;
          if (!opened?.equals(hex(t.msg))) failures.push(`tcId ${t.tcId} (valid) did not open to msg`);
          const again = key.open(seal(key, hex(t.msg), hex(t.aad)), hex(t.aad));
          if (!again?.equals(hex(t.msg))) failures.push(`tcId ${t.tcId} (valid) did not round-trip`);
        } else if (t.result === 'invalid') {
          counts.invalid++;
          if (opened !== null) failures.push(`tcId ${t.tcId} (invalid: ${t.comment}) was accepted`);
        } else {
          failures.push(`tcId ${t.tcId} has result ${t.result}, which this suite does not expect`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(counts.valid).toBeGreaterThan(0);
    expect(counts.invalid).toBeGreaterThan(0);
  });
});

describe('Wycheproof aes_siv_cmac_test.json, 512-bit key groups (AES-256-SIV)', () => {
  it('decrypts and re-encrypts every valid case exactly, and rejects every invalid case', () => {
    const file = loadWycheproof<DaeadCase>('aes_siv_cmac_test.json');
    const groups = file.testGroups.filter((g) => g.type === 'DaeadTest' && g.keySize === 512);
    const failures: string[] = [];
    const counts = { valid: 0, invalid: 0 };
    for (const group of groups) {
      for (const t of group.tests) {
        const key = importKey('AES-256-SIV', hex(t.key));
        const opened = key.open(hex(t.ct), hex(t.aad));
        if (t.result === 'valid') {
          counts.valid++;
          if (!opened?.equals(hex(t.msg))) failures.push(`tcId ${t.tcId} (valid) did not decrypt to msg`);
          if (!seal(key, hex(t.msg), hex(t.aad)).equals(hex(t.ct))) {
            failures.push(`tcId ${t.tcId} (valid) did not encrypt to ct`);
          }
        } else if (t.result === 'invalid') {
          counts.invalid++;
          if (opened !== null) failures.push(`tcId ${t.tcId} (invalid: ${t.comment}) was accepted`);
        } else {
          failures.push(`tcId ${t.tcId} has result ${t.result}, which this suite does not expect`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(counts.valid).toBeGreaterThan(0);
    expect(counts.invalid).toBeGreaterThan(0);
  });
});

describe('Wycheproof aes_kwp_test.json, 256-bit KEK groups (RFC 5649 key wrap with padding)', () => {
  it('wraps every valid case to its ct exactly and back, and refuses to unwrap every invalid case', () => {
    const file = loadWycheproof<KeywrapCase>('aes_kwp_test.json');
    const groups = file.testGroups.filter((g) => g.keySize === 256);
    const failures: string[] = [];
    const counts = { valid: 0, invalid: 0 };
    for (const group of groups) {
      for (const t of group.tests) {
        const kek = hex(t.key);
        const unwrapped = unwrapKey(kek, hex(t.ct));
        if (t.result === 'valid') {
          counts.valid++;
          if (!wrapKey(kek, hex(t.msg)).equals(hex(t.ct))) failures.push(`tcId ${t.tcId} (valid) did not wrap to ct`);
          if (!unwrapped?.equals(hex(t.msg))) failures.push(`tcId ${t.tcId} (valid) did not unwrap to msg`);
        } else if (t.result === 'invalid') {
          counts.invalid++;
          if (unwrapped !== null) failures.push(`tcId ${t.tcId} (invalid: ${t.comment}) was unwrapped`);
        } else {
          failures.push(`tcId ${t.tcId} has result ${t.result}, which this suite does not expect`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(counts.valid).toBeGreaterThan(0);
    expect(counts.invalid).toBeGreaterThan(0);
  });

  it('refuses a KEK that is not 256 bits and empty material', () => {
    expect(() => wrapKey(Buffer.alloc(16), Buffer.alloc(32))).toThrow(RangeError);
    expect(() => unwrapKey(Buffer.alloc(16), Buffer.alloc(40))).toThrow(RangeError);
    expect(() => wrapKey(Buffer.alloc(32), Buffer.alloc(0))).toThrow(RangeError);
  });

  it('does not unwrap under a different KEK', () => {
    const wrapped = wrapKey(Buffer.alloc(32, 1), Buffer.alloc(64, 7));
    expect(unwrapKey(Buffer.alloc(32, 1), wrapped)).toEqual(Buffer.alloc(64, 7));
    expect(unwrapKey(Buffer.alloc(32, 2), wrapped)).toBeNull();
  });
});
