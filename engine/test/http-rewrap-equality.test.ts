// Rewrap and equality terms through app.inject, under the standard paths and the '/engine' context
// path: a key rotation (version 2 added to the snapshot), moving old ciphertexts to it over every
// transport, and finding equal values across both versions.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_EQUALITY_TERMS } from '../src/core/execution-service.js';
import type { PolicyRecord, RecordStatus } from '../src/core/records.js';
import { BINARY_FRAME_TYPE, decodeResponseFrame, encodeRequestFrame } from '../src/http/codecs/binary-frame.js';
import { GCM_KEY_V1, GCM_KEY_V2, key, SIV_KEY_V1, standardContent } from './support/fixtures.js';
import { JSON_HEADERS, type TestApp, testApp } from './support/http.js';

const SIV_KEY_V2 = Buffer.alloc(64, 0x5a).toString('hex');
const FRAME = { 'content-type': BINARY_FRAME_TYPE };

let t: TestApp;
afterEach(async () => {
  await t?.app.close();
});

function post(url: string, body: unknown, headers: Record<string, string> = JSON_HEADERS) {
  return t.app.inject({ method: 'POST', url, headers, payload: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body) });
}

function keyVersionOf(ciphertext: string): number {
  return Buffer.from(ciphertext.split(':')[2] ?? '', 'base64url').readUInt32BE(2);
}

/** The standard content plus version 2 of both keys (optionally with other states for version 1). */
function rotated(v1Status: RecordStatus = 'ACTIVE', policies?: PolicyRecord[]) {
  const base = standardContent();
  return {
    policies: policies ?? base.policies,
    keys: [
      key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1, v1Status),
      key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2),
      key('test-siv', 1, 'AES-256-SIV', SIV_KEY_V1, v1Status),
      key('test-siv', 2, 'AES-256-SIV', SIV_KEY_V2),
    ],
    runtimeVersion: 'rotated',
  };
}

async function encrypt(prefix: string, data: string, policyCode: string): Promise<string> {
  const res = await post(`${prefix}/api/encrypt`, { data, policyCode });
  expect(res.statusCode).toBe(200);
  return res.json().data as string;
}

async function decrypt(prefix: string, data: string): Promise<string> {
  const res = await post(`${prefix}/api/decrypt`, { data });
  expect(res.statusCode).toBe(200);
  return res.json().data as string;
}

describe.each(['', '/engine'])('rewrap under "%s"', (prefix) => {
  beforeEach(async () => {
    t = await testApp();
  });

  it('moves a ciphertext to the newest active key version of its policy after a rotation', async () => {
    const gcm = await encrypt(prefix, 'alice@example.com', 'PII_GCM');
    const siv = await encrypt(prefix, '123-45-6789', 'PII_SIV');
    t.cache.replace(rotated());
    for (const [old, code, plain] of [
      [gcm, 'PII_GCM', 'alice@example.com'],
      [siv, 'PII_SIV', '123-45-6789'],
    ] as const) {
      const res = await post(`${prefix}/api/rewrap`, { data: old });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(Object.keys(body)).toEqual(['success', 'data', 'policyCode']);
      expect(body).toMatchObject({ success: true, policyCode: code });
      expect(keyVersionOf(old)).toBe(1);
      expect(keyVersionOf(body.data)).toBe(2);
      expect(await decrypt(prefix, body.data)).toBe(plain);
    }
    // Under SIV the rewrapped value is exactly what a fresh encrypt gives now: equality search works again.
    expect((await post(`${prefix}/api/rewrap`, { data: siv })).json().data).toBe(
      await encrypt(prefix, '123-45-6789', 'PII_SIV'),
    );
  });

  it('returns a ciphertext already under the newest version unchanged, once it authenticated', async () => {
    for (const code of ['PII_GCM', 'PII_SIV']) {
      const current = await encrypt(prefix, 'same', code);
      const res = await post(`${prefix}/api/rewrap`, { data: current });
      expect(res.json()).toEqual({ success: true, data: current, policyCode: code });
      // Tampered (one byte of the sealed part flipped): refused like a decrypt, not echoed back.
      const raw = Buffer.from(current.split(':')[2] as string, 'base64url');
      raw[raw.length - 1] = (raw[raw.length - 1] as number) ^ 1;
      const tampered = `hub:${code}:${raw.toString('base64url')}`;
      const refused = await post(`${prefix}/api/rewrap`, { data: tampered });
      expect(refused.statusCode).toBe(422);
      expect(refused.json()).toEqual({ success: false, error: 'decryption failed' });
    }
  });

  it('refuses policy fields, bad bodies and ciphertexts it cannot read with the catalogue answers', async () => {
    const ct = await encrypt(prefix, 'x', 'PII_GCM');
    for (const extra of [{ policyCode: 'PII_GCM' }, { policyName: 'customer' }, { policyVersion: 1 }, { encryptedData: 'x' }]) {
      const res = await post(`${prefix}/api/rewrap`, { data: ct, ...extra });
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ success: false, error: 'rewrap request accepts data only' });
    }
    const cases: [unknown, number, unknown][] = [
      [{ data: 'not a ciphertext' }, 400, { success: false, error: 'malformed ciphertext' }],
      [{ data: 42 }, 400, { success: false, error: 'data must be a string' }],
      [[ct], 400, { success: false, error: 'request must be a JSON object' }],
      ['{"data":', 400, { error: 'decode request: body is not valid JSON' }],
      [{ data: ct.replace('hub:PII_GCM:', 'hub:NOPE:') }, 404, { success: false, error: 'policy not found: NOPE' }],
    ];
    for (const [body, status, answer] of cases) {
      const res = await post(`${prefix}/api/rewrap`, body);
      expect(res.statusCode).toBe(status);
      expect(res.json()).toEqual(answer);
    }
    const wrongType = await post(`${prefix}/api/rewrap`, 'x', { 'content-type': 'text/plain' });
    expect(wrongType.statusCode).toBe(415);
  });

  it('refuses a ciphertext under a disabled version (404) and a policy that may no longer encrypt (409)', async () => {
    const ct = await encrypt(prefix, 'x', 'PII_GCM');
    t.cache.replace(rotated('DISABLED'));
    const disabled = await post(`${prefix}/api/rewrap`, { data: ct });
    expect(disabled.statusCode).toBe(404);
    expect(disabled.json()).toEqual({ success: false, error: 'key not found: test-gcm version 1' });

    const decryptOnly = standardContent().policies.map((p) =>
      p.policyCode === 'PII_GCM' ? { ...p, status: 'DECRYPT_ONLY' as const } : p,
    );
    t.cache.replace(rotated('ACTIVE', decryptOnly));
    const res = await post(`${prefix}/api/rewrap`, { data: ct });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual({ success: false, error: 'policy PII_GCM is decrypt-only' });
    // It still decrypts: the data is not stranded.
    expect(await decrypt(prefix, ct)).toBe('x');
  });

  it('rewraps a JSON batch item by item, with originalData the submitted ciphertext', async () => {
    const a = await encrypt(prefix, 'a', 'PII_GCM');
    const b = await encrypt(prefix, 'b', 'PII_SIV');
    t.cache.replace(rotated());
    const res = await post(`${prefix}/api/rewrap/batch`, {
      items: [{ data: a }, { data: b, policyCode: 'PII_SIV' }, { data: 'garbage' }, { data: b }],
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-svc-transport-mode']).toBe('json');
    const body = res.json();
    expect(body).toMatchObject({ success: false, transportMode: 'json', totalProcessed: 4, totalSuccess: 2, totalFailed: 2 });
    expect(body.results[0]).toMatchObject({ success: true, code: 1000, message: 'rewrap succeeded', originalData: a, policyCode: 'PII_GCM' });
    expect(keyVersionOf(body.results[0].encryptedData)).toBe(2);
    expect(body.results[1]).toEqual({
      success: false,
      code: 2000,
      message: 'rewrap request accepts data only',
      originalData: b,
      policyCode: 'PII_SIV',
    });
    expect(body.results[2]).toEqual({ success: false, code: 2000, message: 'malformed ciphertext', originalData: 'garbage' });
    expect(await decrypt(prefix, body.results[3].encryptedData)).toBe('b');

    const legacy = await post(`${prefix}/api/rewrap/batch`, { requests: [{ data: a }] });
    expect(legacy.json().totalSuccess).toBe(1);
    const none = await post(`${prefix}/api/rewrap/batch`, { data: a });
    expect(none.statusCode).toBe(400);
    expect(none.json()).toEqual({ error: 'decode request: batch request requires an items array' });
  });

  it('rewraps a binary frame (operation 03, result 83) and refuses a frame of another operation', async () => {
    const a = await encrypt(prefix, 'frame-a', 'PII_GCM');
    t.cache.replace(rotated());
    const res = await post(`${prefix}/api/rewrap/batch`, encodeRequestFrame('rewrap', [{ data: a }, { data: a.replace('hub:PII_GCM:', 'hub:NOPE:') }]), FRAME);
    expect(res.statusCode).toBe(200);
    expect(res.headers['x-svc-transport-mode']).toBe('binary-frame');
    const frame = decodeResponseFrame(res.rawPayload);
    expect(frame.operation).toBe(0x83);
    expect(frame.totals).toMatchObject({ totalSuccess: 1, totalFailed: 1 });
    const moved = frame.items[0]?.data.toString('latin1') as string;
    expect(frame.items[0]).toMatchObject({ code: 1000, status: 0, policyCode: 'PII_GCM' });
    expect(keyVersionOf(moved)).toBe(2);
    expect(await decrypt(prefix, moved)).toBe('frame-a');
    expect(frame.items[1]).toMatchObject({ code: 2000, status: 404, policyCode: 'NOPE' });

    const wrongOp = await post(`${prefix}/api/rewrap/batch`, encodeRequestFrame('decrypt', [{ data: a }]), FRAME);
    expect(wrongOp.statusCode).toBe(400);
    expect(wrongOp.json()).toEqual({ error: 'decode request: binary frame operation does not match the rewrap endpoint' });
  });

  it('answers 413 for a batch over the item limit and 503 while nothing is loaded', async () => {
    await t.app.close();
    t = await testApp({ limits: { maxBatchItems: 2 } });
    const many = await post(`${prefix}/api/rewrap/batch`, { items: [{ data: 'a' }, { data: 'b' }, { data: 'c' }] });
    expect(many.statusCode).toBe(413);
    expect(many.json()).toEqual({ error: 'batch has 3 items; the limit is 2' });
    await t.app.close();
    t = await testApp({ content: null });
    const empty = await post(`${prefix}/api/rewrap`, { data: 'hub:P:AAAA' });
    expect(empty.statusCode).toBe(503);
    expect(empty.json()).toEqual({ error: 'crypto service is not configured' });
  });

  it('rewraps the ciphertext of a binary (non-UTF-8) value over JSON, which decrypt cannot return as text', async () => {
    const raw = Buffer.from([0xff, 0x00, 0xfe]);
    const enc = await post(`${prefix}/api/encrypt/batch`, encodeRequestFrame('encrypt', [{ policyCode: 'PII_GCM', data: raw }]), FRAME);
    const ct = decodeResponseFrame(enc.rawPayload).items[0]?.data.toString('latin1') as string;
    t.cache.replace(rotated());
    const res = await post(`${prefix}/api/rewrap`, { data: ct });
    expect(res.statusCode).toBe(200);
    expect(keyVersionOf(res.json().data)).toBe(2);
    const dec = await post(`${prefix}/api/decrypt/batch`, encodeRequestFrame('decrypt', [{ data: res.json().data }]), FRAME);
    expect(decodeResponseFrame(dec.rawPayload).items[0]?.data).toEqual(raw);
  });

  it('answers 405 for other methods on the rewrap and equality-terms paths', async () => {
    for (const url of ['/api/rewrap', '/api/rewrap/batch', '/api/rewrap/stream', '/api/equality-terms']) {
      const res = await t.app.inject({ method: 'GET', url: `${prefix}${url}` });
      expect(res.statusCode).toBe(405);
      expect(res.json()).toEqual({ error: 'method not allowed' });
    }
  });

  it('rewraps an NDJSON stream line by line, with an error line for a bad one', async () => {
    const a = await encrypt(prefix, 'stream-a', 'PII_SIV');
    t.cache.replace(rotated());
    const res = await post(
      `${prefix}/api/rewrap/stream`,
      `${JSON.stringify({ data: a })}\nnot json\n${JSON.stringify({ data: a, policyCode: 'PII_SIV' })}\n`,
      { 'content-type': 'application/x-ndjson' },
    );
    expect(res.statusCode).toBe(200);
    const lines = res.body.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatchObject({ success: true, policyCode: 'PII_SIV' });
    expect(keyVersionOf(lines[0].data)).toBe(2);
    expect(lines[1]).toEqual({ success: false, error: 'decode request: line is not valid JSON' });
    expect(lines[2]).toEqual({ success: false, error: 'rewrap request accepts data only' });
  });
});

describe.each(['', '/engine'])('equality terms under "%s"', (prefix) => {
  beforeEach(async () => {
    t = await testApp();
  });

  it('gives one term per key version that can decrypt, newest first, matching values of both versions', async () => {
    const before = await encrypt(prefix, '123-45-6789', 'PII_SIV');
    t.cache.replace(rotated());
    const after = await encrypt(prefix, '123-45-6789', 'PII_SIV');
    expect(after).not.toBe(before);
    const res = await post(`${prefix}/api/equality-terms`, { data: '123-45-6789', policyCode: 'PII_SIV' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ success: true, terms: [after, before], policyCode: 'PII_SIV' });
    // Every term is a ciphertext of the value.
    for (const term of res.json().terms) expect(await decrypt(prefix, term)).toBe('123-45-6789');

    const byName = await post(`${prefix}/api/equality-terms`, { data: '123-45-6789', policyName: 'customer', policyVersion: 2 });
    expect(byName.json()).toMatchObject({ success: true, policyCode: 'CUSTOMER_V2' });
    expect(byName.json().terms).toHaveLength(2);
  });

  it('leaves out versions that may not decrypt', async () => {
    t.cache.replace(rotated('DISABLED'));
    const res = await post(`${prefix}/api/equality-terms`, { data: 'v', policyCode: 'PII_SIV' });
    expect(res.json().terms).toHaveLength(1);
    expect(keyVersionOf(res.json().terms[0])).toBe(2);
  });

  it('refuses a randomized policy, a missing or unknown policy, and a bad value', async () => {
    const cases: [unknown, number, unknown][] = [
      [{ data: 'x', policyCode: 'PII_GCM' }, 400, { success: false, error: 'equality terms need a deterministic policy: PII_GCM' }],
      [{ data: 'x' }, 400, { success: false, error: 'encrypt request requires policyCode or policyName' }],
      [{ data: 'x', policyCode: 'NOPE' }, 404, { success: false, error: 'policy not found: NOPE' }],
      [{ data: 1, policyCode: 'PII_SIV' }, 400, { success: false, error: 'data must be a string' }],
    ];
    for (const [body, status, answer] of cases) {
      const res = await post(`${prefix}/api/equality-terms`, body);
      expect(res.statusCode).toBe(status);
      expect(res.json()).toEqual(answer);
    }
  });

  it(`refuses with 409 when more than ${MAX_EQUALITY_TERMS} key versions can decrypt`, async () => {
    const keys = Array.from({ length: MAX_EQUALITY_TERMS + 1 }, (_, i) =>
      key('test-siv', i + 1, 'AES-256-SIV', Buffer.alloc(64, i + 1).toString('hex')),
    );
    t.cache.replace({ policies: standardContent().policies, keys: [...keys, key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1)], runtimeVersion: 'many' });
    const res = await post(`${prefix}/api/equality-terms`, { data: 'x', policyCode: 'PII_SIV' });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toEqual({
      success: false,
      error: `policy PII_SIV has ${MAX_EQUALITY_TERMS + 1} key versions that can decrypt; equality terms cover at most ${MAX_EQUALITY_TERMS}: rewrap old data and retire old versions`,
    });
  });
});
