// The hub client's own rules, against stub fetches and local listeners: the cap on an answer's size
// (streamed, cancelled as soon as it is passed), redirects never followed (the tenant header must
// not travel to another address) and hub error bodies never copied into the engine's errors.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type FetchLike, HubClient, HubError, MAX_HUB_ANSWER_BYTES } from '../src/hub/hub-client.js';
import type { HeartbeatRequest } from '../src/hub/protocol.js';

const identity = { hubUrl: 'http://hub.test:9100', tenantId: 'tenant-secret-header' };
const beat: HeartbeatRequest = {
  tenantId: identity.tenantId,
  engineVersion: '0.0.0-test',
  runtimeVersion: '',
  status: 'OFFLINE',
  sentAt: new Date(0).toISOString(),
  cache: { policyCount: 0, keyCount: 0 },
  cryptoMetrics: { keys: [], totalEncryptions: 0, totalDecryptions: 0, nearLimit: false },
};

const CHUNK = 64 * 1024;

/** A body produced on demand, `total` bytes of spaces; counts what was pulled and whether it was cancelled. */
function endlessBody(total: number) {
  const seen = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (seen.pulled >= total) {
        controller.close();
        return;
      }
      const size = Math.min(CHUNK, total - seen.pulled);
      seen.pulled += size;
      controller.enqueue(new Uint8Array(size).fill(0x20));
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { stream, seen };
}

async function hubError(promise: Promise<unknown>): Promise<HubError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(HubError);
  return error as HubError;
}

const calls = {
  heartbeat: (client: HubClient, to = identity) => client.heartbeat(to, beat),
  manifest: (client: HubClient, to = identity) => client.manifest(to),
} as const;

describe('answer size cap', () => {
  for (const [what, call] of Object.entries(calls)) {
    it(`stops reading a ${what} answer past the cap and cancels the body`, async () => {
      const { stream, seen } = endlessBody(64 * CHUNK);
      const fetch: FetchLike = async () => new Response(stream, { status: 200 });
      const error = await hubError(call(new HubClient({ timeoutMs: 5000, fetch, maxAnswerBytes: 4 * CHUNK })));
      expect(error.message).toBe(`hub ${what} failed: hub answer exceeds ${4 * CHUNK} bytes`);
      expect(seen.cancelled).toBe(true);
      // The stream may have been asked for a chunk or two ahead, never for the whole answer.
      expect(seen.pulled).toBeLessThanOrEqual(8 * CHUNK);
    });
  }

  it(`caps answers at ${MAX_HUB_ANSWER_BYTES} bytes by default`, async () => {
    const { stream, seen } = endlessBody(MAX_HUB_ANSWER_BYTES + 16 * CHUNK);
    const fetch: FetchLike = async () => new Response(stream, { status: 200 });
    const error = await hubError(calls.heartbeat(new HubClient({ timeoutMs: 5000, fetch })));
    expect(error.message).toBe(`hub heartbeat failed: hub answer exceeds ${MAX_HUB_ANSWER_BYTES} bytes`);
    expect(seen.cancelled).toBe(true);
    expect(seen.pulled).toBeLessThan(MAX_HUB_ANSWER_BYTES + 16 * CHUNK);
  });

  it('refuses an answer whose declared length is over the cap without reading it', async () => {
    const { stream, seen } = endlessBody(4 * CHUNK);
    const fetch: FetchLike = async () =>
      new Response(stream, { status: 200, headers: { 'content-length': String(10 * CHUNK) } });
    const error = await hubError(calls.manifest(new HubClient({ timeoutMs: 5000, fetch, maxAnswerBytes: CHUNK })));
    expect(error.message).toBe(`hub manifest failed: hub answer exceeds ${CHUNK} bytes`);
    expect(seen.pulled).toBeLessThanOrEqual(2 * CHUNK);
  });

  it('reads an answer of exactly the cap in full', async () => {
    const json = JSON.stringify({ runtimeVersion: 'r1', policies: [], keys: [] });
    const fetch: FetchLike = async () => new Response(json.padEnd(CHUNK, ' '), { status: 200 });
    const manifest = await calls.manifest(new HubClient({ timeoutMs: 5000, fetch, maxAnswerBytes: CHUNK }));
    expect(manifest).toEqual({ runtimeVersion: 'r1', policies: [], keys: [] });
  });
});

describe('redirects', () => {
  const servers: Server[] = [];

  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
  });

  async function listen(handler: Parameters<typeof createServer>[1]): Promise<string> {
    const server = createServer(handler);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  for (const [what, call] of Object.entries(calls)) {
    it(`does not follow a ${what} redirect, so the tenant header never reaches its target`, async () => {
      const seenByTarget: IncomingHttpHeaders[] = [];
      const target = await listen((req, res) => {
        seenByTarget.push(req.headers);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
      const hubUrl = await listen((req, res) => res.writeHead(307, { location: `${target}${req.url}` }).end());
      const client = new HubClient({ timeoutMs: 5000 });
      const error = await hubError(call(client, { ...identity, hubUrl }));
      expect(error.message).toBe(`hub ${what} failed: hub answered a redirect (3xx); not followed`);
      expect(seenByTarget).toEqual([]);
    });
  }

  it('asks fetch not to follow redirects and refuses any 3xx answer', async () => {
    const modes: RequestInit['redirect'][] = [];
    const fetch: FetchLike = async (_url, init) => {
      modes.push(init.redirect);
      return new Response(null, { status: 302, headers: { location: 'http://elsewhere.test/' } });
    };
    const error = await hubError(calls.manifest(new HubClient({ timeoutMs: 5000, fetch })));
    expect(error.message).toBe('hub manifest failed: hub answered a redirect (3xx); not followed');
    expect(modes).toEqual(['manual']);
  });
});

describe('error answers', () => {
  for (const [what, call] of Object.entries(calls)) {
    it(`reports only the status of a failed ${what}, never the hub's error body`, async () => {
      const fetch: FetchLike = async () =>
        new Response(JSON.stringify({ error: 'db password=hunter2' }), { status: 500 });
      const error = await hubError(call(new HubClient({ timeoutMs: 5000, fetch })));
      expect(error.message).toBe(`hub ${what} failed: hub answered 500`);
      expect(error.message).not.toContain('hunter2');
      // An empty error body does not change the detail either.
      const bare: FetchLike = async () => new Response(null, { status: 401 });
      const empty = await hubError(call(new HubClient({ timeoutMs: 5000, fetch: bare })));
      expect(empty.message).toBe(`hub ${what} failed: hub answered 401`);
    });
  }
});
