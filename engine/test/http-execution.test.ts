// The execution API through app.inject: every row of the contract's §4.1 and §7.1, under both the
// standard paths and the '/engine' context path.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { policy } from './support/fixtures.js';
import { JSON_HEADERS, TEST_VERSION, type TestApp, testApp } from './support/http.js';

let t: TestApp;
afterEach(async () => {
  await t?.app.close();
});

function post(url: string, body: unknown, headers: Record<string, string> = JSON_HEADERS) {
  return t.app.inject({
    method: 'POST',
    url,
    headers,
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

describe.each(['', '/engine'])('execution API under "%s"', (prefix) => {
  beforeEach(async () => {
    t = await testApp();
  });

  it('reports health on /health, /actuator/health and /api/health', async () => {
    const health = await t.app.inject({ url: `${prefix}/health` });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'UP' });

    const actuator = await t.app.inject({ url: `${prefix}/actuator/health` });
    expect(actuator.statusCode).toBe(200);
    expect(actuator.json()).toMatchObject({
      status: 'UP',
      components: { crypto: { status: 'UP', details: { policyCount: 6, keyCount: 2 } } },
    });

    const api = await t.app.inject({ url: `${prefix}/api/health` });
    expect(api.statusCode).toBe(200);
    expect(api.json()).toEqual({ status: 'UP', service: 'svc-engine', version: TEST_VERSION });

    const ready = await t.app.inject({ url: `${prefix}/api/health/ready` });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'UP', policyCount: 6, keyCount: 2 });
  });

  it('encrypts a single value into the hub:<policy_code>:<rest> shape and decrypts it back', async () => {
    const enc = await post(`${prefix}/api/encrypt`, { data: 'alice@example.com', policyCode: 'PII_GCM' });
    expect(enc.statusCode).toBe(200);
    const body = enc.json();
    expect(Object.keys(body)).toEqual(['success', 'data', 'policyCode']);
    expect(body.success).toBe(true);
    expect(body.policyCode).toBe('PII_GCM');
    expect(body.data).toMatch(/^hub:PII_GCM:[A-Za-z0-9_-]+$/);

    const dec = await post(`${prefix}/api/decrypt`, { data: body.data });
    expect(dec.statusCode).toBe(200);
    expect(dec.json()).toEqual({ success: true, data: 'alice@example.com', policyCode: 'PII_GCM' });
  });

  it('resolves policyName to its latest version, or to the version asked for', async () => {
    const latest = await post(`${prefix}/api/encrypt`, { data: 'x', policyName: 'customer' });
    expect(latest.json().policyCode).toBe('CUSTOMER_V2');
    const v1 = await post(`${prefix}/api/encrypt`, { data: 'x', policyName: 'customer', policyVersion: 1 });
    expect(v1.json().policyCode).toBe('CUSTOMER_V1');
  });

  it('gives the same ciphertext twice under a deterministic policy and different ones under a randomized policy', async () => {
    const siv = await Promise.all(
      [1, 2].map(() => post(`${prefix}/api/encrypt`, { data: 'same', policyCode: 'PII_SIV' })),
    );
    expect(siv[0]?.json().data).toBe(siv[1]?.json().data);
    const gcm = await Promise.all(
      [1, 2].map(() => post(`${prefix}/api/encrypt`, { data: 'same', policyCode: 'PII_GCM' })),
    );
    expect(gcm[0]?.json().data).not.toBe(gcm[1]?.json().data);
  });

  it('rejects an encrypt request without policyCode and policyName (rule 1)', async () => {
    const res = await post(`${prefix}/api/encrypt`, { data: 'x' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ success: false, error: 'encrypt request requires policyCode or policyName' });
    expect(res.body).toBe('{"success":false,"error":"encrypt request requires policyCode or policyName"}');
  });

  it.each(['encryptedData', 'policyCode', 'policyName', 'policyVersion'])(
    'rejects a decrypt request carrying %s (rule 2)',
    async (field) => {
      const res = await post(`${prefix}/api/decrypt`, {
        data: 'hub:PII_GCM:AAAA',
        [field]: field === 'policyVersion' ? 1 : 'x',
      });
      expect(res.statusCode).toBe(400);
      expect(res.body).toBe('{"success":false,"error":"decrypt request accepts data only"}');
    },
  );

  it('answers 400 with a decode error when the JSON cannot be decoded', async () => {
    const res = await post(`${prefix}/api/encrypt`, '{"data": "x", ');
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: 'decode request: body is not valid JSON' });
    const empty = await post(`${prefix}/api/decrypt`, '');
    expect(empty.statusCode).toBe(400);
    expect(empty.json().error).toMatch(/^decode request: /);
  });

  it('refuses a body that is not valid UTF-8 instead of encrypting replacement characters', async () => {
    const body = Buffer.concat([Buffer.from('{"data":"'), Buffer.from([0xc3, 0x28]), Buffer.from('","policyCode":"PII_SIV"}')]);
    const res = await t.app.inject({ method: 'POST', url: `${prefix}/api/encrypt`, headers: JSON_HEADERS, payload: body });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: 'decode request: body is not valid UTF-8' });
  });

  it('answers 404, not 405, for a known path with a trailing slash', async () => {
    const res = await post(`${prefix}/api/encrypt/`, { data: 'x', policyCode: 'PII_GCM' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'not found' });
  });

  it('answers 400 in the catalogue shape for a URL that cannot be decoded', async () => {
    const res = await t.app.inject({ url: `${prefix}/api/%zz` });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: 'decode request: the URL is not valid' });
  });

  it('does not echo the request body in a decode error', async () => {
    const res = await post(`${prefix}/api/encrypt`, '{"data": "secret-value", policyCode}');
    expect(res.statusCode).toBe(400);
    expect(res.body).not.toContain('secret-value');
  });

  it.each([
    ['/api/encrypt', 'GET'],
    ['/api/decrypt', 'PUT'],
    ['/api/encrypt/batch', 'GET'],
    ['/api/decrypt/batch', 'DELETE'],
    ['/api/encrypt/stream', 'GET'],
    ['/api/decrypt/stream', 'PATCH'],
    ['/api/health', 'POST'],
    ['/health', 'POST'],
    ['/actuator/health', 'DELETE'],
  ])('answers 405 on %s with %s', async (path, method) => {
    const res = await t.app.inject({ method: method as 'GET', url: `${prefix}${path}` });
    expect(res.statusCode).toBe(405);
    expect(res.json()).toEqual({ error: 'method not allowed' });
    expect(res.headers.allow).toBeTruthy();
  });

  it('answers 404 with a JSON body for an unknown path', async () => {
    const res = await t.app.inject({ url: `${prefix}/api/nothing-here` });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'not found' });
  });

  it('encrypts a JSON batch in request order with per-item results and totals', async () => {
    const items = [
      { data: 'a', policyCode: 'PII_GCM' },
      { data: 'b' },
      { data: 'c', policyCode: 'NOPE' },
      { data: 'd', policyName: 'customer', policyVersion: 1 },
      'not an object',
    ];
    const res = await post(`${prefix}/api/encrypt/batch`, { items });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({
      success: false,
      transportMode: 'json',
      totalProcessed: 5,
      totalSuccess: 2,
      totalFailed: 3,
    });
    expect(Number.isInteger(body.totalProcessingTime)).toBe(true);
    expect(body.results[0]).toEqual({
      success: true,
      code: 1000,
      message: 'encrypt succeeded',
      originalData: 'a',
      encryptedData: expect.stringMatching(/^hub:PII_GCM:/),
      policyCode: 'PII_GCM',
    });
    expect(body.results[1]).toEqual({
      success: false,
      code: 2000,
      message: 'encrypt request requires policyCode or policyName',
      originalData: 'b',
    });
    expect(body.results[2]).toMatchObject({
      success: false,
      code: 2000,
      message: 'policy not found: NOPE',
      originalData: 'c',
    });
    expect(body.results[3]).toMatchObject({ success: true, code: 1000, policyCode: 'CUSTOMER_V1' });
    expect(body.results[4]).toEqual({ success: false, code: 2000, message: 'request must be a JSON object' });
  });

  it('decrypts a batch sent under the compatibility field `requests`', async () => {
    const enc = await post(`${prefix}/api/encrypt/batch`, {
      requests: [
        { data: 'one', policyCode: 'PII_GCM' },
        { data: 'two', policyCode: 'PII_SIV' },
      ],
    });
    const ciphertexts = enc.json().results.map((r: { encryptedData: string }) => r.encryptedData);
    const dec = await post(`${prefix}/api/decrypt/batch`, {
      requests: [
        { data: ciphertexts[0] },
        { data: 'hub:PII_GCM:garbage!' },
        { data: ciphertexts[1], policyCode: 'X' },
        { data: ciphertexts[1] },
      ],
    });
    expect(dec.statusCode).toBe(200);
    const body = dec.json();
    expect(body).toMatchObject({
      success: false,
      transportMode: 'json',
      totalProcessed: 4,
      totalSuccess: 2,
      totalFailed: 2,
    });
    expect(body.results[0]).toEqual({
      success: true,
      code: 1000,
      message: 'decrypt succeeded',
      originalData: ciphertexts[0],
      decryptedData: 'one',
      policyCode: 'PII_GCM',
    });
    expect(body.results[1]).toMatchObject({ success: false, code: 2000, message: 'malformed ciphertext', policyCode: 'PII_GCM' });
    expect(body.results[2]).toMatchObject({ success: false, code: 2000, message: 'decrypt request accepts data only' });
    expect(body.results[3]).toMatchObject({ success: true, decryptedData: 'two', policyCode: 'PII_SIV' });
  });

  it('answers an all-successful batch with success true and an empty batch with zero totals', async () => {
    const ok = await post(`${prefix}/api/encrypt/batch`, { items: [{ data: 'a', policyCode: 'PII_SIV' }] });
    expect(ok.json()).toMatchObject({ success: true, totalSuccess: 1, totalFailed: 0 });
    const empty = await post(`${prefix}/api/encrypt/batch`, { items: [] });
    expect(empty.statusCode).toBe(200);
    expect(empty.json()).toMatchObject({ success: true, results: [], totalProcessed: 0 });
  });

  it.each([{}, { items: 'x' }, { items: { data: 'a' } }, [1, 2]])(
    'answers 400 when a batch has no items array: %j',
    async (body) => {
      const res = await post(`${prefix}/api/encrypt/batch`, body);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ error: 'decode request: batch request requires an items array' });
    },
  );

  it('answers 404 for an unknown policy, 400 for malformed ciphertext and 422 for a tampered one', async () => {
    const unknown = await post(`${prefix}/api/encrypt`, { data: 'x', policyCode: 'UNKNOWN' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ success: false, error: 'policy not found: UNKNOWN' });

    const unknownByName = await post(`${prefix}/api/encrypt`, { data: 'x', policyName: 'customer', policyVersion: 7 });
    expect(unknownByName.statusCode).toBe(404);
    expect(unknownByName.json()).toEqual({ success: false, error: 'policy not found: customer version 7' });

    const malformed = await post(`${prefix}/api/decrypt`, { data: 'not-a-ciphertext' });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toEqual({ success: false, error: 'malformed ciphertext' });

    const enc = await post(`${prefix}/api/encrypt`, { data: 'hello', policyCode: 'PII_GCM' });
    const ct: string = enc.json().data;
    const last = ct.at(-2) === 'A' ? 'B' : 'A';
    const tampered = `${ct.slice(0, -2)}${last}${ct.at(-1)}`;
    const res = await post(`${prefix}/api/decrypt`, { data: tampered });
    expect(res.statusCode).toBe(422);
    expect(res.json()).toEqual({ success: false, error: 'decryption failed' });

    const moved = await post(`${prefix}/api/decrypt`, { data: ct.replace('hub:PII_GCM:', 'hub:PII_GCM_OTHER:') });
    expect(moved.statusCode).toBe(422);
    expect(moved.json()).toEqual({ success: false, error: 'decryption failed' });
  });

  it('answers 400 for other invalid fields with the reason', async () => {
    const both = await post(`${prefix}/api/encrypt`, { data: 'x', policyCode: 'PII_GCM', policyName: 'customer' });
    expect(both.statusCode).toBe(400);
    expect(both.json()).toEqual({ success: false, error: 'policyCode cannot be combined with policyName' });
    const version = await post(`${prefix}/api/encrypt`, { data: 'x', policyCode: 'PII_GCM', policyVersion: 2 });
    expect(version.json()).toEqual({ success: false, error: 'policyVersion is used only together with policyName' });
    const negative = await post(`${prefix}/api/encrypt`, { data: 'x', policyName: 'customer', policyVersion: 0 });
    expect(negative.json()).toEqual({ success: false, error: 'policyVersion must be a positive integer' });
    const number = await post(`${prefix}/api/encrypt`, { data: 42, policyCode: 'PII_GCM' });
    expect(number.statusCode).toBe(400);
    expect(number.json()).toEqual({ success: false, error: 'data must be a string' });
  });

  it('serves the OpenAPI document generated from the route schemas', async () => {
    const res = await t.app.inject({ url: `${prefix}/openapi.json` });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/api/encrypt', '/api/decrypt/batch', '/api/encrypt/stream', '/api/health']),
    );
  });
});

describe('policy and key statuses over HTTP', () => {
  it('refuses encryption under a decrypt-only policy with 409 and still decrypts its ciphertexts', async () => {
    t = await testApp();
    const enc = await post('/api/encrypt', { data: 'keep me', policyCode: 'PII_GCM' });
    const { policies, keys } = t.cache.current;
    t.cache.replace({
      policies: policies.map((p) =>
        p.policyCode === 'PII_GCM' ? policy('PII_GCM', 'AES-256-GCM', 'test-gcm', { status: 'DECRYPT_ONLY' }) : p,
      ),
      keys,
      runtimeVersion: 'test-2',
    });
    const refused = await post('/api/encrypt', { data: 'x', policyCode: 'PII_GCM' });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toEqual({ success: false, error: 'policy PII_GCM is decrypt-only' });
    const dec = await post('/api/decrypt', { data: enc.json().data });
    expect(dec.json()).toEqual({ success: true, data: 'keep me', policyCode: 'PII_GCM' });
  });
});

describe('an engine with nothing loaded', () => {
  beforeEach(async () => {
    t = await testApp({ content: null });
  });

  it.each([
    ['/api/encrypt', { data: 'x', policyCode: 'P' }],
    ['/api/decrypt', { data: 'hub:P:AAAAAAAAAA' }],
    ['/api/encrypt/batch', { items: [] }],
    ['/api/decrypt/batch', { items: [{ data: 'x' }] }],
  ])('answers 503 "crypto service is not configured" on %s', async (url, body) => {
    const res = await post(url, body);
    expect(res.statusCode).toBe(503);
    expect(res.body).toBe('{"error":"crypto service is not configured"}');
  });

  it('answers 503 on the streams before reading any line', async () => {
    const res = await post('/api/encrypt/stream', '{"data":"x","policyCode":"P"}\n', {
      'content-type': 'application/x-ndjson',
    });
    expect(res.statusCode).toBe(503);
    expect(res.json()).toEqual({ error: 'crypto service is not configured' });
  });

  it('reports DOWN on /actuator/health but stays UP on /health and /api/health', async () => {
    const actuator = await t.app.inject({ url: '/actuator/health' });
    expect(actuator.statusCode).toBe(503);
    expect(actuator.json()).toMatchObject({ status: 'DOWN', components: { crypto: { status: 'DOWN' } } });
    expect((await t.app.inject({ url: '/health' })).statusCode).toBe(200);
    expect((await t.app.inject({ url: '/api/health' })).json().status).toBe('UP');
  });

  it('answers 503 on readiness with the contract error body while nothing is loaded', async () => {
    const ready = await t.app.inject({ url: '/api/health/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.body).toBe('{"error":"crypto service is not configured"}');
  });
});

describe('limits and content types', () => {
  it('answers 413 when the body exceeds the limit', async () => {
    t = await testApp({ limits: { bodyLimitBytes: 1024 } });
    const res = await post('/api/encrypt', { data: 'x'.repeat(2048), policyCode: 'PII_GCM' });
    expect(res.statusCode).toBe(413);
    expect(res.json()).toEqual({ error: 'request body exceeds 1024 bytes' });
  });

  it('answers 413 when a batch has more items than allowed, and fails an item whose data is too large', async () => {
    t = await testApp({ limits: { maxBatchItems: 3, maxDataBytes: 10 } });
    const many = await post('/api/encrypt/batch', {
      items: Array.from({ length: 4 }, () => ({ data: 'a', policyCode: 'PII_GCM' })),
    });
    expect(many.statusCode).toBe(413);
    expect(many.json()).toEqual({ error: 'batch has 4 items; the limit is 3' });
    const big = await post('/api/encrypt/batch', { items: [{ data: 'x'.repeat(11), policyCode: 'PII_GCM' }] });
    expect(big.statusCode).toBe(200);
    expect(big.json().results[0]).toMatchObject({ success: false, code: 2000, message: 'data exceeds 10 bytes' });
    const single = await post('/api/encrypt', { data: 'x'.repeat(11), policyCode: 'PII_GCM' });
    expect(single.statusCode).toBe(413);
    expect(single.json()).toEqual({ error: 'data exceeds 10 bytes' });
  });

  it.each([
    ['/api/encrypt', 'text/plain'],
    ['/api/encrypt', 'application/x-ndjson'],
    ['/api/encrypt', 'application/x-svc-binary-frame'],
    ['/api/decrypt/batch', 'application/x-ndjson'],
    ['/api/encrypt/stream', 'application/json'],
    ['/api/decrypt', 'application/xml'],
    ['/api/decrypt/stream', 'application/json'],
  ])('answers 415 on %s for %s', async (url, type) => {
    t = await testApp();
    const res = await post(url, '{"data":"x","policyCode":"PII_GCM"}', { 'content-type': type });
    expect(res.statusCode).toBe(415);
    expect(res.json()).toEqual({ error: `unsupported content type: ${type}` });
  });

  it('refuses a JSON body on a stream path with 415 before trying to parse it', async () => {
    t = await testApp();
    const res = await post('/api/encrypt/stream', '{not json', JSON_HEADERS);
    expect(res.statusCode).toBe(415);
    expect(res.json()).toEqual({ error: 'unsupported content type: application/json' });
  });

  it('accepts application/json with a charset parameter', async () => {
    t = await testApp();
    const res = await post(
      '/api/encrypt',
      { data: 'x', policyCode: 'PII_GCM' },
      { 'content-type': 'application/json; charset=utf-8' },
    );
    expect(res.statusCode).toBe(200);
  });
});
