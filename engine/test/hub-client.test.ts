// The hub client's own rules, against stub fetches: the cap on an answer's size (streamed, cancelled
// as soon as it is passed).
import { describe, expect, it } from 'vitest';
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
  heartbeat: (client: HubClient) => client.heartbeat(identity, beat),
  manifest: (client: HubClient) => client.manifest(identity),
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
