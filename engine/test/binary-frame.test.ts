// The binary frame: codec properties (round trips, random bytes never crash the decoder) and the
// batch endpoints speaking it, raw non-UTF-8 bytes included.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { EngineError, errors } from '../src/core/errors.js';
import {
  BINARY_FRAME_TYPE,
  decodeFrameItems,
  decodeRequestFrame,
  decodeResponseFrame,
  encodeRequestFrame,
  encodeResponseFrame,
  type FrameResult,
} from '../src/http/codecs/binary-frame.js';
import { type TestApp, testApp } from './support/http.js';

const FRAME = { 'content-type': BINARY_FRAME_TYPE };
const bytes = fc.uint8Array({ maxLength: 64 });
const encryptItem = fc.oneof(
  fc.record({ policyCode: fc.string({ minLength: 1, maxLength: 20 }), data: bytes }),
  fc.record({
    policyName: fc.string({ minLength: 1, maxLength: 20 }),
    policyVersion: fc.option(fc.integer({ min: 1, max: 0xffffffff }), { nil: undefined }),
    data: bytes,
  }),
);

describe('binary frame codec', () => {
  it('decodes what it encodes (encrypt requests)', () => {
    fc.assert(
      fc.property(fc.array(encryptItem, { maxLength: 20 }), (items) => {
        const decoded = decodeRequestFrame(encodeRequestFrame('encrypt', items), 'encrypt', 100);
        expect(decoded.operation).toBe('encrypt');
        expect(decoded.items).toEqual(
          items
            .map((i) => ({
              data: Buffer.from(i.data),
              policyCode: 'policyCode' in i ? i.policyCode : undefined,
              policyName: 'policyName' in i ? i.policyName : undefined,
              policyVersion: 'policyVersion' in i ? i.policyVersion : undefined,
            }))
            .map((i) =>
              Object.fromEntries(Object.entries(i).filter(([k, v]) => v !== undefined || k === 'policyVersion')),
            ),
        );
      }),
    );
  });

  it('decodes what it encodes (decrypt requests)', () => {
    fc.assert(
      fc.property(fc.array(fc.stringMatching(/^[ -~]{0,40}$/), { maxLength: 20 }), (items) => {
        const decoded = decodeRequestFrame(
          encodeRequestFrame(
            'decrypt',
            items.map((data) => ({ data })),
          ),
          'decrypt',
          100,
        );
        expect(decoded.operation).toBe('decrypt');
        expect(decoded.items).toEqual(items);
      }),
    );
  });

  it("reads any run of a frame's items again from their bytes, as a crypto worker gets its slice", () => {
    const operations = fc.constantFrom('encrypt' as const, 'decrypt' as const, 'rewrap' as const);
    const ciphertexts = fc.array(fc.stringMatching(/^[ -~]{0,40}$/).map((data) => ({ data })), { maxLength: 20 });
    fc.assert(
      fc.property(operations, fc.array(encryptItem, { maxLength: 20 }), ciphertexts, fc.nat(), fc.nat(), (operation, plain, sealed, a, b) => {
        const frame = encodeRequestFrame(operation, operation === 'encrypt' ? plain : sealed);
        const { items, offsets } = decodeRequestFrame(frame, operation, 100);
        expect(offsets).toHaveLength(items.length + 1);
        const start = items.length === 0 ? 0 : a % items.length;
        const end = start + (b % (items.length - start + 1));
        const bytes = Buffer.from(frame.subarray(offsets[start], offsets[end]));
        expect(decodeFrameItems(operation, bytes, end - start)).toEqual(items.slice(start, end));
      }),
    );
  });

  it('decodes what it encodes (responses)', () => {
    const result: fc.Arbitrary<FrameResult> = fc.oneof(
      fc.record({ ok: fc.constant(true as const), policyCode: fc.string({ maxLength: 20 }), data: bytes }),
      fc.record({
        ok: fc.constant(false as const),
        policyCode: fc.option(fc.string({ maxLength: 20 }), { nil: undefined }),
        error: fc.constantFrom(errors.decryptionFailed(), errors.policyNotFound('X')),
      }),
    );
    fc.assert(
      fc.property(fc.array(result, { maxLength: 20 }), fc.nat(), (results, ms) => {
        const totals = {
          totalSuccess: results.filter((r) => r.ok).length,
          totalFailed: results.filter((r) => !r.ok).length,
          totalProcessingTime: ms,
        };
        const decoded = decodeResponseFrame(encodeResponseFrame('encrypt', results, totals));
        expect(decoded.totals).toEqual(totals);
        decoded.items.forEach((item, i) => {
          const r = results[i] as FrameResult;
          expect(item.code).toBe(r.ok ? 1000 : 2000);
          expect(item.status).toBe(r.ok ? 0 : r.error.status);
          expect(item.policyCode).toBe(r.policyCode ?? '');
          expect(item.data).toEqual(r.ok ? Buffer.from(r.data) : Buffer.from(r.error.message));
        });
      }),
    );
  });

  it('never crashes on random bytes: it decodes or throws a 400/413 engine error', () => {
    const valid = encodeRequestFrame('encrypt', [{ policyCode: 'P', data: 'abc' }]);
    const mutated = fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })).map(([i, b]) => {
      const copy = Buffer.from(valid);
      copy[i] = b;
      return copy;
    });
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
          mutated,
          fc.nat(valid.length).map((n) => valid.subarray(0, n)),
        ),
        fc.constantFrom('encrypt', 'decrypt') as fc.Arbitrary<'encrypt' | 'decrypt'>,
        (buf, op) => {
          try {
            decodeRequestFrame(buf, op, 1000);
          } catch (error) {
            expect(error).toBeInstanceOf(EngineError);
            expect([400, 413]).toContain((error as EngineError).status);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('refuses a forged item count before allocating for it', () => {
    const frame = encodeRequestFrame('decrypt', []);
    frame.writeUInt32BE(0xffffffff, 8);
    expect(() => decodeRequestFrame(frame, 'decrypt', 1000)).toThrow('batch has 4294967295 items; the limit is 1000');
    expect(() => decodeRequestFrame(frame, 'decrypt', 0xffffffff)).toThrow(
      'decode request: binary frame item count exceeds the frame',
    );
  });
});

describe('batch endpoints with the binary frame', () => {
  let t: TestApp;
  afterEach(async () => {
    await t?.app.close();
  });

  it('round-trips raw bytes that are not UTF-8, with per-item status and error text', async () => {
    t = await testApp();
    const raw = Buffer.from([0xff, 0x00, 0xfe, 0x80, 0x0a]);
    const enc = await t.app.inject({
      method: 'POST',
      url: '/api/encrypt/batch',
      headers: FRAME,
      payload: encodeRequestFrame('encrypt', [
        { policyCode: 'PII_GCM', data: raw },
        { policyCode: 'NOPE', data: 'x' },
        { policyName: 'customer', policyVersion: 1, data: 'text' },
        { policyCode: 'PII_GCM', policyVersion: 3, data: 'x' },
      ]),
    });
    expect(enc.statusCode).toBe(200);
    expect(enc.headers['content-type']).toBe(BINARY_FRAME_TYPE);
    expect(enc.headers['x-svc-transport-mode']).toBe('binary-frame');
    const encrypted = decodeResponseFrame(enc.rawPayload);
    expect(encrypted.totals).toMatchObject({ totalSuccess: 2, totalFailed: 2 });
    expect(encrypted.items.map((i) => [i.code, i.status, i.policyCode])).toEqual([
      [1000, 0, 'PII_GCM'],
      [2000, 404, 'NOPE'],
      [1000, 0, 'CUSTOMER_V1'],
      [2000, 400, 'PII_GCM'],
    ]);
    expect(encrypted.items[1]?.data.toString()).toBe('policy not found: NOPE');
    expect(encrypted.items[3]?.data.toString()).toBe('policyVersion is used only together with policyName');

    const ciphertext = encrypted.items[0]?.data.toString('latin1') as string;
    expect(ciphertext).toMatch(/^hub:PII_GCM:/);
    const dec = await t.app.inject({
      method: 'POST',
      url: '/api/decrypt/batch',
      headers: FRAME,
      payload: encodeRequestFrame('decrypt', [
        { data: ciphertext },
        { data: ciphertext.replace('hub:PII_GCM:', 'hub:PII_GCM_OTHER:') },
      ]),
    });
    const decrypted = decodeResponseFrame(dec.rawPayload);
    expect(decrypted.items[0]?.data).toEqual(raw);
    expect(decrypted.items[1]).toMatchObject({ code: 2000, status: 422 });
    expect(decrypted.items[1]?.data.toString()).toBe('decryption failed');

    // The same ciphertext through JSON cannot carry these bytes as text: a clear error, not mangled data.
    const json = await t.app.inject({
      method: 'POST',
      url: '/api/decrypt',
      headers: { 'content-type': 'application/json' },
      payload: { data: ciphertext },
    });
    expect(json.statusCode).toBe(422);
    expect(json.json()).toEqual({
      success: false,
      error: 'decrypted data is not valid UTF-8; use the binary frame transport',
    });
  });

  it('answers 400 for a frame that does not decode or does not match the endpoint, 413 for too many items', async () => {
    t = await testApp({ limits: { maxBatchItems: 2 } });
    const wrongOp = await t.app.inject({
      method: 'POST',
      url: '/api/decrypt/batch',
      headers: FRAME,
      payload: encodeRequestFrame('encrypt', []),
    });
    expect(wrongOp.statusCode).toBe(400);
    expect(wrongOp.json()).toEqual({
      error: 'decode request: binary frame operation does not match the decrypt endpoint',
    });
    const truncated = await t.app.inject({
      method: 'POST',
      url: '/api/encrypt/batch',
      headers: FRAME,
      payload: encodeRequestFrame('encrypt', [{ policyCode: 'P', data: 'abc' }]).subarray(0, 25),
    });
    expect(truncated.statusCode).toBe(400);
    expect(truncated.json().error).toMatch(/^decode request: binary frame truncated/);
    const garbage = await t.app.inject({
      method: 'POST',
      url: '/api/encrypt/batch',
      headers: FRAME,
      payload: Buffer.from('{"items":[]}'),
    });
    expect(garbage.json()).toEqual({ error: 'decode request: not a binary frame (bad magic)' });
    const many = await t.app.inject({
      method: 'POST',
      url: '/api/encrypt/batch',
      headers: FRAME,
      payload: encodeRequestFrame(
        'encrypt',
        [1, 2, 3].map(() => ({ policyCode: 'PII_GCM', data: 'a' })),
      ),
    });
    expect(many.statusCode).toBe(413);
    expect(many.json()).toEqual({ error: 'batch has 3 items; the limit is 2' });
  });
});
