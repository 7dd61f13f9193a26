// The ciphertext envelope: its encoding round-trips, its parser fails only with `malformed ciphertext`,
// and, through the execution service, no edit of a ciphertext string ever yields data.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  associatedData,
  encodeHeader,
  formatEnvelope,
  HEADER_LENGTH,
  envelopePolicyCode,
  POLICY_CODE_PATTERN,
  parseEnvelope,
} from '../src/core/ciphertext-envelope.js';
import { EngineError, type ErrorCode } from '../src/core/errors.js';
import { GCM_KEY_V1, key, serviceWith, standardContent } from './support/fixtures.js';

const policyCode = fc.stringMatching(POLICY_CODE_PATTERN);
const algorithmId = fc.integer({ min: 0, max: 0xff });
const keyVersion = fc.integer({ min: 0, max: 0xffff_ffff });
const sealedBytes = fc.uint8Array({ minLength: 1, maxLength: 200 });

/** Runs `fn` and returns the EngineError code it threw, failing the test if it returned or threw anything else. */
function errorCodeOf(fn: () => unknown): ErrorCode {
  let result: unknown;
  try {
    result = fn();
  } catch (error) {
    if (error instanceof EngineError) return error.code;
    throw error;
  }
  throw new Error(`expected an EngineError, got a result: ${JSON.stringify(result)}`);
}

/** Rewrites an envelope's body (header ‖ sealed) and optionally its policy code, keeping it canonical. */
function rewrite(ciphertext: string, edit: (body: Buffer) => void, code?: string): string {
  const parsed = parseEnvelope(ciphertext);
  const body = Buffer.concat([parsed.aad.subarray(parsed.aad.length - HEADER_LENGTH), parsed.sealed]);
  edit(body);
  return formatEnvelope(code ?? parsed.policyCode, body);
}

/** `value` with one bit of the UTF-16 code unit at `index` flipped: still a string, possibly not well-formed. */
function flipBit(value: string, index: number, bit: number): string {
  return value.slice(0, index) + String.fromCharCode(value.charCodeAt(index) ^ (1 << bit)) + value.slice(index + 1);
}

/** Every string that differs from `value` in exactly one bit of one UTF-16 code unit. */
function* singleBitEdits(value: string): Generator<string> {
  for (let i = 0; i < value.length; i++) {
    for (let bit = 0; bit < 16; bit++) yield flipBit(value, i, bit);
  }
}

const REJECTIONS: readonly ErrorCode[] = [
  'MALFORMED_CIPHERTEXT',
  'DECRYPTION_FAILED',
  'POLICY_NOT_FOUND',
  'KEY_NOT_FOUND',
];

describe('formatEnvelope and parseEnvelope', () => {
  it('round-trip any policy code, algorithm id, key version and sealed bytes', () => {
    fc.assert(
      fc.property(policyCode, algorithmId, keyVersion, sealedBytes, (code, alg, version, sealed) => {
        const header = encodeHeader(alg, version);
        const text = formatEnvelope(code, Buffer.concat([header, sealed]));
        expect(text.startsWith(`hub:${code}:`)).toBe(true);
        expect(envelopePolicyCode(text)).toBe(code);
        const parsed = parseEnvelope(text);
        expect(parsed.policyCode).toBe(code);
        expect(parsed.formatVersion).toBe(1);
        expect(parsed.algorithmId).toBe(alg);
        expect(parsed.keyVersion).toBe(version);
        expect(parsed.sealed).toEqual(Buffer.from(sealed));
        expect(parsed.aad).toEqual(associatedData(code, header));
        expect(parsed.aad.toString('latin1').startsWith(`hub:${code}:`)).toBe(true);
      }),
    );
  });

  it('never throws anything but malformed ciphertext on arbitrary strings', () => {
    const candidates = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.string().map((s) => `hub:${s}`),
      fc.tuple(fc.string(), fc.string()).map(([a, b]) => `hub:${a}:${b}`),
      fc.tuple(policyCode, fc.base64String()).map(([c, b]) => `hub:${c}:${b}`),
      fc.tuple(policyCode, fc.uint8Array()).map(([c, b]) => `hub:${c}:${Buffer.from(b).toString('base64url')}`),
    );
    fc.assert(
      fc.property(candidates, (text) => {
        try {
          parseEnvelope(text);
        } catch (error) {
          expect(error).toBeInstanceOf(EngineError);
          expect((error as EngineError).code).toBe('MALFORMED_CIPHERTEXT');
          expect((error as EngineError).message).toBe('malformed ciphertext');
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses non-canonical base64, padding, a short body and an unknown format version', () => {
    const body = Buffer.concat([encodeHeader(1, 1), Buffer.from([0xff])]);
    const canonical = formatEnvelope('P', body);
    expect(parseEnvelope(canonical).sealed).toEqual(Buffer.from([0xff]));
    // 7 bytes encode to 10 characters; the last one carries 4 unused bits that must be zero.
    const lastBitsSet = `${canonical.slice(0, -1)}${canonical.endsWith('w') ? 'x' : 'w'}`;
    const cases = [
      lastBitsSet,
      `${canonical}==`,
      formatEnvelope('P', encodeHeader(1, 1)),
      formatEnvelope('P', Buffer.concat([Buffer.from([2]), body.subarray(1)])),
      `hub:P:${body.toString('base64')}+`,
      'hub::AQEAAAAB_w',
      'hub:P',
      'HUB:P:AQEAAAAB_w',
      '',
    ];
    for (const text of cases) {
      expect(
        errorCodeOf(() => parseEnvelope(text)),
        text,
      ).toBe('MALFORMED_CIPHERTEXT');
    }
  });
});

describe('tampering with a ciphertext through the execution service', () => {
  it('rejects every single-bit change of every character with an engine error', () => {
    const { service } = serviceWith();
    const samples = [
      service.encryptOne({ data: '', policyCode: 'PII_GCM' }).data,
      service.encryptOne({ data: 'alice@example.com', policyCode: 'PII_GCM' }).data,
      service.encryptOne({ data: '', policyCode: 'PII_SIV' }).data,
      service.encryptOne({ data: 'alice@example.com', policyCode: 'PII_SIV' }).data,
    ];
    let edits = 0;
    for (const ciphertext of samples) {
      expect(service.decryptOne({ data: ciphertext }).data).toBeTypeOf('string');
      for (const edited of singleBitEdits(ciphertext)) {
        edits++;
        expect(REJECTIONS, edited).toContain(errorCodeOf(() => service.decryptOne({ data: edited })));
      }
    }
    expect(edits).toBeGreaterThan(1000);
  });

  it('rejects a single-bit change of any ciphertext of any plaintext (property)', () => {
    const { service } = serviceWith();
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme', maxLength: 40 }),
        fc.constantFrom('PII_GCM', 'PII_SIV'),
        fc.nat(),
        fc.integer({ min: 0, max: 15 }),
        (data, code, position, bit) => {
          const ciphertext = service.encryptOne({ data, policyCode: code }).data;
          const edited = flipBit(ciphertext, position % ciphertext.length, bit);
          expect(REJECTIONS).toContain(errorCodeOf(() => service.decryptOne({ data: edited })));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('fails authentication when a ciphertext is moved to another policy on the same key', () => {
    const { service } = serviceWith();
    for (const [from, to] of [
      ['PII_GCM', 'PII_GCM_OTHER'],
      ['PII_SIV', 'PII_SIV_OTHER'],
    ] as const) {
      const ciphertext = service.encryptOne({ data: 'secret', policyCode: from }).data;
      const moved = rewrite(ciphertext, () => {}, to);
      expect(moved.startsWith(`hub:${to}:`)).toBe(true);
      expect(errorCodeOf(() => service.decryptOne({ data: moved }))).toBe('DECRYPTION_FAILED');
    }
  });

  it('fails authentication when the key version is edited, even to a version with the same material', () => {
    // Version 2 carries the very same bytes as version 1, so only the associated data can tell them apart.
    const content = standardContent();
    content.keys.push(key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V1, 'DECRYPT_ONLY'));
    const { service } = serviceWith(content);
    const ciphertext = service.encryptOne({ data: 'secret', policyCode: 'PII_GCM' }).data;
    expect(parseEnvelope(ciphertext).keyVersion).toBe(1);
    const toTwo = rewrite(ciphertext, (body) => body.writeUInt32BE(2, 2));
    expect(errorCodeOf(() => service.decryptOne({ data: toTwo }))).toBe('DECRYPTION_FAILED');
    const toThree = rewrite(ciphertext, (body) => body.writeUInt32BE(3, 2));
    expect(errorCodeOf(() => service.decryptOne({ data: toThree }))).toBe('KEY_NOT_FOUND');
  });

  it('fails authentication when the algorithm id is edited', () => {
    const { service } = serviceWith();
    const ciphertext = service.encryptOne({ data: 'secret', policyCode: 'PII_SIV' }).data;
    for (const id of [0, 1, 3, 255]) {
      const edited = rewrite(ciphertext, (body) => body.writeUInt8(id, 1));
      expect(errorCodeOf(() => service.decryptOne({ data: edited }))).toBe('DECRYPTION_FAILED');
    }
  });
});
