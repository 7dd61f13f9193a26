// The stream and binary paths through a real listening server: incremental NDJSON processing,
// error lines that do not stop the stream, the binary frame over the wire, and graceful draining.
import { once } from 'node:events';
import { type ClientRequest, type IncomingMessage, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BINARY_FRAME_TYPE, decodeResponseFrame, encodeRequestFrame } from '../src/http/codecs/binary-frame.js';
import { type TestApp, testApp } from './support/http.js';
import { rawExchange } from './support/raw-socket.js';

let t: TestApp;
let base: URL;

beforeEach(async () => {
  t = await testApp({ limits: { maxStreamLineBytes: 1024 } });
  await t.app.listen({ host: '127.0.0.1', port: 0 });
  base = new URL(`http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`);
});

afterEach(async () => {
  await t.app.close();
});

/** Opens a streaming POST and returns the request (to write to) and an async line reader of the response. */
async function openStream(
  path: string,
): Promise<{ req: ClientRequest; next: () => Promise<string>; res: IncomingMessage }> {
  const req = request(new URL(path, base), { method: 'POST', headers: { 'content-type': 'application/x-ndjson' } });
  req.flushHeaders();
  const responded = once(req, 'response') as Promise<[IncomingMessage]>;
  req.write('{"data":"first","policyCode":"PII_GCM"}\n');
  const [res] = await responded;
  res.setEncoding('utf8');
  let buffered = '';
  const waiting: ((line: string) => void)[] = [];
  const lines: string[] = [];
  res.on('data', (chunk: string) => {
    buffered += chunk;
    let nl = buffered.indexOf('\n');
    while (nl !== -1) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      const waiter = waiting.shift();
      if (waiter) waiter(line);
      else lines.push(line);
      nl = buffered.indexOf('\n');
    }
  });
  const next = () => {
    const line = lines.shift();
    return line !== undefined ? Promise.resolve(line) : new Promise<string>((resolve) => waiting.push(resolve));
  };
  return { req, next, res };
}

describe('NDJSON streams over a real connection', () => {
  it('answers each line as it arrives, before the request body ends', async () => {
    const { req, next, res } = await openStream('/api/encrypt/stream');
    expect(res.headers['content-type']).toBe('application/x-ndjson');
    const first = JSON.parse(await next());
    expect(first).toMatchObject({ success: true, policyCode: 'PII_GCM' });
    expect(Object.keys(first)).toEqual(['success', 'data', 'policyCode']);

    // Each later line is only written after the previous answer was read: the engine cannot be buffering.
    const ciphertexts: string[] = [first.data];
    for (let i = 0; i < 5; i++) {
      req.write(`{"data":"value-${i}","policyCode":"PII_SIV"}\n`);
      const line = JSON.parse(await next());
      expect(line).toMatchObject({ success: true, policyCode: 'PII_SIV' });
      ciphertexts.push(line.data);
    }
    req.write('this is not json\n');
    expect(JSON.parse(await next())).toEqual({ success: false, error: 'decode request: line is not valid JSON' });
    req.write('{"data":"no policy"}\n');
    expect(JSON.parse(await next())).toEqual({
      success: false,
      error: 'encrypt request requires policyCode or policyName',
    });
    req.write(`{"data":"${'x'.repeat(2000)}","policyCode":"PII_GCM"}\n`);
    expect(JSON.parse(await next())).toEqual({ success: false, error: 'line exceeds 1024 bytes' });
    req.write('{"data":"after the errors","policyCode":"PII_GCM"}\n');
    const after = JSON.parse(await next());
    expect(after.success).toBe(true);
    ciphertexts.push(after.data);
    req.end();
    await once(res, 'end');

    const dec = await fetch(new URL('/api/decrypt/stream', base), {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: `${ciphertexts.map((data) => JSON.stringify({ data })).join('\n')}\n{"data":"hub:PII_GCM:bad"}\n`,
    });
    const lines = (await dec.text())
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.data)).toEqual([
      'first',
      'value-0',
      'value-1',
      'value-2',
      'value-3',
      'value-4',
      'after the errors',
      undefined,
    ]);
    expect(lines.at(-1)).toEqual({ success: false, error: 'malformed ciphertext' });
  });

  it('keeps order across many lines sent in one large body', async () => {
    const n = 20_000;
    const body = Array.from({ length: n }, (_, i) => JSON.stringify({ data: `row-${i}`, policyCode: 'PII_SIV' })).join(
      '\n',
    );
    const enc = await fetch(new URL('/engine/api/encrypt/stream', base), {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body,
    });
    const encrypted = (await enc.text()).trimEnd().split('\n');
    expect(encrypted).toHaveLength(n);
    const dec = await fetch(new URL('/api/decrypt/stream', base), {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: encrypted.map((l) => JSON.stringify({ data: JSON.parse(l).data })).join('\n'),
    });
    const plain = (await dec.text())
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l).data);
    expect(plain).toEqual(Array.from({ length: n }, (_, i) => `row-${i}`));
  });
});

describe('binary frame over a real connection', () => {
  it('round-trips a batch of raw bytes', async () => {
    const values = Array.from({ length: 50 }, (_, i) => Buffer.from([i, 0xff, 0x00, i]));
    const enc = await fetch(new URL('/api/encrypt/batch', base), {
      method: 'POST',
      headers: { 'content-type': BINARY_FRAME_TYPE },
      body: encodeRequestFrame(
        'encrypt',
        values.map((data) => ({ policyCode: 'PII_GCM', data })),
      ),
    });
    expect(enc.status).toBe(200);
    expect(enc.headers.get('x-svc-transport-mode')).toBe('binary-frame');
    const ciphertexts = decodeResponseFrame(Buffer.from(await enc.arrayBuffer())).items.map((i) =>
      i.data.toString('latin1'),
    );
    const dec = await fetch(new URL('/api/decrypt/batch', base), {
      method: 'POST',
      headers: { 'content-type': BINARY_FRAME_TYPE },
      body: encodeRequestFrame(
        'decrypt',
        ciphertexts.map((data) => ({ data })),
      ),
    });
    expect(decodeResponseFrame(Buffer.from(await dec.arrayBuffer())).items.map((i) => i.data)).toEqual(values);
  });
});

describe('malformed HTTP and slow clients', () => {
  it('answers a malformed request line with a 400 in the catalogue shape', async () => {
    const answer = await rawExchange(Number(base.port), (s) => s.write('BREW /api/encrypt HTTP/1.1\r\nHost: x\r\n\r\n'));
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer.endsWith('{"error":"decode request: malformed HTTP request"}')).toBe(true);
  });

  it('cuts off a body that trickles in for longer than the request timeout with 408', async () => {
    const slow = await testApp({ limits: { requestTimeoutMs: 1000, idleTimeoutMs: 5000 } });
    await slow.app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const port = (slow.app.server.address() as AddressInfo).port;
      const answer = await rawExchange(port, (s) => {
        s.write('POST /api/encrypt HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n');
        const drip = setInterval(() => s.writable && s.write(' '), 200);
        s.once('close', () => clearInterval(drip));
      });
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
      expect(answer.endsWith('{"error":"request timed out"}')).toBe(true);
    } finally {
      await slow.app.close();
    }
  });
});

describe('graceful shutdown', () => {
  it('lets an in-flight stream finish while new requests get 503', async () => {
    const { req, next, res } = await openStream('/api/encrypt/stream');
    expect(JSON.parse(await next()).success).toBe(true);

    const stopped = t.lifecycle.shutdown(10_000);
    const health = await fetch(new URL('/api/health', base), { headers: { connection: 'close' } });
    expect(health.status).toBe(503);
    expect(await health.json()).toEqual({ error: 'engine is shutting down' });
    const refusedEncrypt = await fetch(new URL('/api/encrypt', base), {
      method: 'POST',
      headers: { 'content-type': 'application/json', connection: 'close' },
      body: '{"data":"x","policyCode":"PII_GCM"}',
    });
    expect(refusedEncrypt.status).toBe(503);
    expect(await refusedEncrypt.json()).toEqual({ error: 'engine is shutting down' });

    req.write('{"data":"still served","policyCode":"PII_GCM"}\n');
    expect(JSON.parse(await next()).success).toBe(true);
    req.end();
    await once(res, 'end');
    await stopped;
    expect(t.app.server.listening).toBe(false);
  });
});
