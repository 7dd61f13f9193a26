// Golden ciphertexts: strings produced once by the engine and committed here. Released ciphertexts
// must decrypt forever, so these constants (and the keys below) must NEVER change. A failure here means
// the envelope, the associated data or an algorithm changed incompatibly: fix the code, not the strings.
// A new format gets new golden strings added beside these, never instead of them.
import { describe, expect, it } from 'vitest';
import { parseEnvelope } from '../src/core/ciphertext-envelope.js';
import { key, policy, serviceWith } from './support/fixtures.js';

const GCM_V1 = '8f1e4c2a7b3d5e6f90a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d6e7f8';
const GCM_V2 = 'd1c2b3a4958677685a4b3c2d1e0f0102f3e4d5c6b7a8998a7b6c5d4e3f201102';
const SIV_V1 =
  '6a09e667f3bcc908bb67ae8584caa73b3c6ef372fe94f82ba54ff53a5f1d36f1510e527fade682d19b05688c2b3e6c1f1f83d9abfb41bd6b5be0cd19137e2179';

const GOLDEN = [
  {
    what: 'GCM, empty string',
    plaintext: '',
    keyVersion: 1,
    ciphertext: 'hub:GOLDEN_GCM:AQEAAAABdaf3SJp-Cdkgz_epeNzq8F92P9a0sAW4jKQsLw',
  },
  {
    what: 'GCM, unicode text',
    plaintext: 'Grüße, 世界! 🔐 naïve café',
    keyVersion: 1,
    ciphertext:
      'hub:GOLDEN_GCM:AQEAAAABg_daXRETSwrkRoO_lMcSlxp33toeAwC0j5ga6mDNqRkSApxQ4YKyBe2TgXiVVjgFC156uQJ0rRiQc5p8BOs',
  },
  {
    what: 'GCM, key version 2 after rotation',
    plaintext: 'rotated to key version 2',
    keyVersion: 2,
    ciphertext: 'hub:GOLDEN_GCM:AQEAAAACTUC1Ye5uFxqkuG2cC1sBOff11rFdgGpXFQ_O-kRKccncwX6E-4urGfFifso61_Jz1Dsnjg',
  },
  {
    what: 'SIV, text',
    plaintext: 'alice@example.com',
    keyVersion: 1,
    ciphertext: 'hub:GOLDEN_SIV:AQIAAAABJUPVTIQOd3GrQg8YZfPrBP7iOHcRJjrmryIMe9of4Hu5',
  },
  {
    what: 'SIV, empty string',
    plaintext: '',
    keyVersion: 1,
    ciphertext: 'hub:GOLDEN_SIV:AQIAAAABQTlhZKSfQSqWDTU7bfEyZA',
  },
  {
    what: 'SIV, unicode text',
    plaintext: 'Grüße, 世界! 🔐',
    keyVersion: 1,
    ciphertext: 'hub:GOLDEN_SIV:AQIAAAABCkzN9fBTC7sNjJPuKUqLvTxTTqxquVf-KZdDvNihiuyTvRHPGQ',
  },
] as const;

/** The runtime after rotating the GCM key to version 2: version 1 still decrypts. */
function goldenService() {
  return serviceWith({
    policies: [policy('GOLDEN_GCM', 'AES-256-GCM', 'golden-gcm'), policy('GOLDEN_SIV', 'AES-256-SIV', 'golden-siv')],
    keys: [
      key('golden-gcm', 1, 'AES-256-GCM', GCM_V1, 'DECRYPT_ONLY'),
      key('golden-gcm', 2, 'AES-256-GCM', GCM_V2),
      key('golden-siv', 1, 'AES-256-SIV', SIV_V1),
    ],
  }).service;
}

describe('golden ciphertexts', () => {
  it.each(GOLDEN)('$what decrypts to its plaintext', ({ plaintext, keyVersion, ciphertext }) => {
    const service = goldenService();
    expect(parseEnvelope(ciphertext).keyVersion).toBe(keyVersion);
    expect(service.decryptOne({ data: ciphertext })).toEqual({
      ok: true,
      policyCode: ciphertext.split(':')[1],
      data: plaintext,
    });
  });

  it.each(GOLDEN.filter((g) => g.ciphertext.startsWith('hub:GOLDEN_SIV:')))(
    '$what encrypts to exactly the golden string again (SIV is deterministic)',
    ({ plaintext, ciphertext }) => {
      expect(goldenService().encryptOne({ data: plaintext, policyCode: 'GOLDEN_SIV' }).data).toBe(ciphertext);
    },
  );

  it('new GCM encryptions use key version 2 and differ from the golden string', () => {
    const fresh = goldenService().encryptOne({ data: 'rotated to key version 2', policyCode: 'GOLDEN_GCM' }).data;
    expect(parseEnvelope(fresh).keyVersion).toBe(2);
    expect(fresh).not.toBe(GOLDEN[2].ciphertext);
  });
});
