// @svc/client against the real engine process (dev mode: DEMO_RANDOM and DEMO_DETERMINISTIC): what an
// application calling the engine through the client sees, including the failures it must handle.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  EngineClient,
  EngineConnectionError,
  EngineError,
  EngineTimeoutError,
  OperationsClient,
  type StreamResult,
} from '@svc/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { type FaultProxy, startFaultProxy } from '../src/fault-proxy.js';

let engine: RunningEngine;
let proxy: FaultProxy;

beforeAll(async () => {
  engine = await startEngine({ env: { SVC_AUDIT_FILE: 'off' } });
  proxy = await startFaultProxy(engine.url);
});

afterAll(async () => {
  await proxy?.close();
  await engine?.dispose();
});

describe('execution API', () => {
  it('round-trips single values under both demo policies, with the engine field names', async () => {
    const client = new EngineClient(engine.url);
    const random = await client.encrypt({ data: 'alice@example.com', policyCode: 'DEMO_RANDOM' });
    expect(random).toMatchObject({ success: true, policyCode: 'DEMO_RANDOM' });
    expect(random.data).toMatch(/^hub:DEMO_RANDOM:/);
    expect(await client.decrypt({ data: random.data })).toEqual({ success: true, data: 'alice@example.com', policyCode: 'DEMO_RANDOM' });

    const first = await client.encrypt({ data: 'same', policyCode: 'DEMO_DETERMINISTIC' });
    const second = await client.encrypt({ data: 'same', policyCode: 'DEMO_DETERMINISTIC' });
    expect(second.data).toBe(first.data);
    expect((await client.decrypt(first)).data).toBe('same');
  });

  it('sends a batch of 25,000 items as three requests under the 10,000-item limit, results in order', async () => {
    const client = new EngineClient(proxy.url);
    proxy.counts.clear();
    const items = Array.from({ length: 25_000 }, (_, i) => ({
      data: `value-${i}`,
      policyCode: i % 2 === 0 ? 'DEMO_RANDOM' : 'DEMO_DETERMINISTIC',
    }));
    const encrypted = await client.encryptBatch(items);
    expect(proxy.counts.get('/api/encrypt/batch')).toBe(3);
    expect(encrypted).toMatchObject({ success: true, totalProcessed: 25_000, totalSuccess: 25_000, totalFailed: 0 });
    expect(encrypted.results.map((r) => r.originalData)).toEqual(items.map((i) => i.data));

    const decrypted = await client.decryptBatch(encrypted.results.map((r) => ({ data: r.encryptedData! })));
    expect(proxy.counts.get('/api/decrypt/batch')).toBe(3);
    expect(decrypted.results.map((r) => r.decryptedData)).toEqual(items.map((i) => i.data));
  });

  it('follows an engine with a lower batch limit: the refused chunk is sent again in pieces it accepts', async () => {
    const small = await startEngine({ env: { SVC_AUDIT_FILE: 'off', SVC_BATCH_MAX_ITEMS: '1000' } });
    try {
      const client = new EngineClient(small.url);
      const items = Array.from({ length: 2500 }, (_, i) => ({ data: `v${i}`, policyCode: 'DEMO_DETERMINISTIC' }));
      const answer = await client.encryptBatch(items);
      expect(answer).toMatchObject({ success: true, totalProcessed: 2500, totalSuccess: 2500 });
      expect(answer.results.map((r) => r.originalData)).toEqual(items.map((i) => i.data));
      const again = await client.encryptBatch(items.slice(0, 1500));
      expect(again.results.map((r) => r.encryptedData)).toEqual(answer.results.slice(0, 1500).map((r) => r.encryptedData));
    } finally {
      await small.dispose();
    }
  });

  it('reports item failures of a batch in place without failing the others', async () => {
    const client = new EngineClient(engine.url);
    const answer = await client.encryptBatch([
      { data: 'a', policyCode: 'DEMO_RANDOM' },
      { data: 'b', policyCode: 'NOPE' },
    ]);
    expect(answer).toMatchObject({ success: false, totalSuccess: 1, totalFailed: 1 });
    expect(answer.results[1]).toMatchObject({ success: false, code: 2000, message: 'policy not found: NOPE' });
  });

  it('streams 50,000 lines each way, results in order, a bad line answered in place', async () => {
    const client = new EngineClient(engine.url);
    const count = 50_000;
    let produced = 0;
    async function* source() {
      for (let i = 0; i < count; i += 1) {
        produced += 1;
        yield { data: `line-${i}`, policyCode: i === 7 ? 'NOPE' : 'DEMO_RANDOM' };
      }
    }
    const ciphertexts: string[] = [];
    const failures: StreamResult[] = [];
    for await (const result of client.encryptStream(source())) {
      if (result.success) ciphertexts.push(result.data);
      else failures.push(result);
    }
    expect(produced).toBe(count);
    expect(failures).toEqual([{ success: false, error: 'policy not found: NOPE' }]);
    expect(ciphertexts).toHaveLength(count - 1);

    async function* back() {
      yield* ciphertexts.map((data) => ({ data }));
    }
    let i = 0;
    for await (const result of client.decryptStream(back())) {
      const expected = i < 7 ? i : i + 1;
      expect(result).toEqual({ success: true, data: `line-${expected}`, policyCode: 'DEMO_RANDOM' });
      i += 1;
    }
    expect(i).toBe(count - 1);
  });

  it('serves a source that yields the next item only after the previous result arrived', async () => {
    const client = new EngineClient(engine.url);
    // A conversation over one stream: lines are gathered into chunks, but a chunk must not wait for an
    // item the source will only yield once this one's result is back.
    let answered: () => void = () => undefined;
    async function* conversation() {
      for (let i = 0; i < 20; i++) {
        yield { data: `turn ${i}`, policyCode: 'DEMO_DETERMINISTIC' };
        await new Promise<void>((resolve) => {
          answered = resolve;
        });
      }
    }
    const results: string[] = [];
    for await (const result of client.encryptStream(conversation())) {
      results.push(result.success ? result.policyCode : result.error);
      answered();
    }
    expect(results).toEqual(Array(20).fill('DEMO_DETERMINISTIC'));
  });

  it('reads the stream source only as fast as the results are consumed', async () => {
    const client = new EngineClient(engine.url);
    let produced = 0;
    async function* endless() {
      for (;;) {
        produced += 1;
        yield { data: 'x'.repeat(1024), policyCode: 'DEMO_RANDOM' };
      }
    }
    let consumed = 0;
    for await (const result of client.encryptStream(endless())) {
      expect(result.success).toBe(true);
      consumed += 1;
      if (consumed === 100) break;
    }
    // An endless source ends with the consumer; what was read ahead is bounded by the socket buffers.
    expect(produced).toBeGreaterThanOrEqual(100);
    expect(produced).toBeLessThan(100_000);
  });

  it("ends a stream with the source's own error when the source throws", async () => {
    const client = new EngineClient(engine.url);
    async function* failing() {
      for (let i = 0; i < 3; i += 1) yield { data: `v${i}`, policyCode: 'DEMO_RANDOM' };
      throw new Error('source broke');
    }
    const seen: StreamResult[] = [];
    const error = await (async () => {
      for await (const result of client.encryptStream(failing())) seen.push(result);
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toBe('source broke');
    expect(seen.length).toBeLessThanOrEqual(3);
    // the engine goes on serving
    expect((await client.encrypt({ data: 'after', policyCode: 'DEMO_RANDOM' })).success).toBe(true);
  });

  it('refuses a stream the engine refuses up front with EngineError', async () => {
    const client = new EngineClient(`${engine.url}/nowhere`);
    const error = await (async () => {
      for await (const _ of client.encryptStream([{ data: 'a', policyCode: 'DEMO_RANDOM' }])) void _;
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ status: 404, body: { error: 'not found' } });
  });

  it('encrypts and decrypts raw bytes that are not UTF-8 through the binary frame', async () => {
    const client = new EngineClient(engine.url, { maxBatchItems: 2 });
    const values = [Uint8Array.of(0xff, 0x00, 0xfe), Uint8Array.of(), Uint8Array.from({ length: 300 }, (_, i) => i % 256)];
    const encrypted = await client.encryptBytes(values.map((data) => ({ data, policyCode: 'DEMO_DETERMINISTIC' })));
    expect(encrypted.totalSuccess).toBe(3);
    const ciphertexts = encrypted.results.map((r) => (r.success ? Buffer.from(r.data).toString('ascii') : r.error));
    const decrypted = await client.decryptBytes([...ciphertexts, 'hub:DEMO_RANDOM:AAAA']);
    expect(decrypted.results.slice(0, 3).map((r) => (r.success ? r.data : r.error))).toEqual(values);
    expect(decrypted.results[3]).toEqual({ success: false, status: 400, policyCode: 'DEMO_RANDOM', error: 'malformed ciphertext' });
  });

  it('throws EngineError with the status and the engine body on a 400 and a 404, without retrying', async () => {
    const client = new EngineClient(proxy.url);
    proxy.counts.clear();
    const malformed = await client.decrypt({ data: 'not a ciphertext' }).catch((e: unknown) => e);
    expect(malformed).toBeInstanceOf(EngineError);
    expect(malformed).toMatchObject({ status: 400, body: { success: false, error: 'malformed ciphertext' } });
    expect(proxy.counts.get('/api/decrypt')).toBe(1);

    const unknown = await client.encrypt({ data: 'a', policyCode: 'NOPE' }).catch((e: unknown) => e);
    expect(unknown).toMatchObject({ status: 404, body: { success: false, error: 'policy not found: NOPE' } });
    expect((unknown as EngineError).engineMessage).toBe('policy not found: NOPE');
  });
});

describe('retries and timeouts', () => {
  /** Answers the first `failures` requests 503 (the engine's body), then forwards to the engine. */
  async function unavailableThenEngine(failures: number): Promise<{ url: string; seen: () => number; server: Server }> {
    let seen = 0;
    const server = createServer((req, res) => {
      seen += 1;
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        if (seen <= failures) {
          res.writeHead(503, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: 'crypto service is not configured' }));
          return;
        }
        void fetch(engine.url + req.url, { method: req.method, headers: { 'content-type': req.headers['content-type'] ?? '' }, body: Buffer.concat(chunks) })
          .then(async (answer) => {
            res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? '' });
            res.end(Buffer.from(await answer.arrayBuffer()));
          });
      });
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen: () => seen, server };
  }

  it('retries a 503 with backoff until the engine answers', async () => {
    const front = await unavailableThenEngine(2);
    try {
      const client = new EngineClient(front.url, { retry: { retries: 3, baseDelayMs: 20 } });
      const answer = await client.encrypt({ data: 'after 503', policyCode: 'DEMO_RANDOM' });
      expect(front.seen()).toBe(3);
      expect((await new EngineClient(engine.url).decrypt(answer)).data).toBe('after 503');
    } finally {
      front.server.close();
    }
  });

  it('gives up after the retries with the 503 as an EngineError carrying its body', async () => {
    const front = await unavailableThenEngine(100);
    try {
      const client = new EngineClient(front.url, { retry: { retries: 2, baseDelayMs: 10 } });
      const error = await client.encryptBatch([{ data: 'a', policyCode: 'DEMO_RANDOM' }]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineError);
      expect(error).toMatchObject({ status: 503, body: { error: 'crypto service is not configured' } });
      expect(front.seen()).toBe(3);
    } finally {
      front.server.close();
    }
  });

  it('retries connection errors, then throws EngineConnectionError', async () => {
    proxy.mode = 'reset';
    proxy.counts.clear();
    try {
      const client = new EngineClient(proxy.url, { retry: { retries: 2, baseDelayMs: 10 } });
      const error = await client.encrypt({ data: 'a', policyCode: 'DEMO_RANDOM' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineConnectionError);
      expect(error).toMatchObject({ attempts: 3 });
      expect(proxy.counts.get('/api/encrypt')).toBe(3);
    } finally {
      proxy.mode = 'forward';
    }
  });

  it('times out a call the engine never answers, without retrying it', async () => {
    proxy.mode = 'hang';
    proxy.counts.clear();
    try {
      const client = new EngineClient(proxy.url, { timeoutMs: 300, retry: { retries: 3, baseDelayMs: 10 } });
      const error = await client.encrypt({ data: 'a', policyCode: 'DEMO_RANDOM' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(EngineTimeoutError);
      expect(proxy.counts.get('/api/encrypt')).toBe(1);
    } finally {
      proxy.mode = 'forward';
      proxy.dropConnections();
    }
  });
});

describe('operations API', () => {
  it('registers, then reads runtime info and cache status with the tenant header; a wrong tenant is a 401', async () => {
    const ops = new OperationsClient(engine.opsUrl, { tenantId: 'tenant-client' });
    expect(await ops.register({ hubUrl: 'http://127.0.0.1:9', tenantId: 'tenant-client' })).toEqual({ success: true });
    const info = await ops.runtimeInfo();
    expect(info.engineVersion).toEqual(expect.any(String));
    expect(info.capabilities).toContain('ndjson-stream');
    const status = await ops.cacheStatus();
    expect(status).toEqual({ policyCount: expect.any(Number), keyCount: expect.any(Number) });

    const stranger = new OperationsClient(engine.opsUrl, { tenantId: 'someone-else' });
    const error = await stranger.cacheStatus().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ status: 401, body: 'unauthorized' });
  });
});
