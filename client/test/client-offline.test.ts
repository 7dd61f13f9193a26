// The client's own logic without an engine: the binary frame against the published examples, batches
// split under the limits, and which answers are retried.
import { describe, expect, it } from 'vitest';
import { decodeResponseFrame, encodeCiphertextFrame, encodeEncryptFrame, EngineClient, EngineConnectionError, EngineError } from '../src/index.js';

const hex = (text: string) => Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));

/** A fetch that records the requests and answers each with `answer`. */
function recordingFetch(answer: (body: string, call: number) => Response) {
  const bodies: string[] = [];
  const fake = (async (_url: string | URL | Request, init?: RequestInit) => {
    bodies.push(String(init?.body));
    return answer(String(init?.body), bodies.length);
  }) as typeof fetch;
  return { fake, bodies };
}

function batchAnswer(body: string): Response {
  const items = (JSON.parse(body) as { items: { data: string; policyCode: string }[] }).items;
  const results = items.map((item) => ({ success: true, code: 1000, message: 'encrypt succeeded', originalData: item.data, encryptedData: `hub:${item.policyCode}:x`, policyCode: item.policyCode }));
  return Response.json({ success: true, transportMode: 'json', results, totalProcessed: items.length, totalSuccess: items.length, totalFailed: 0, totalProcessingTime: 1 });
}

describe('binary frame', () => {
  it('encodes the documented encrypt and rewrap examples byte for byte', () => {
    expect(encodeEncryptFrame([{ data: Uint8Array.of(0xff, 0x00), policyCode: 'P' }])).toEqual(
      hex('53564346 01 01 0000 00000001 01 00000000 0001 50 00000002 ff00'),
    );
    const ciphertext = 'hub:P:' + 'A'.repeat(38);
    const frame = encodeCiphertextFrame('rewrap', [ciphertext]);
    expect(frame.subarray(0, 16)).toEqual(hex('53564346 01 03 0000 00000001 0000002c'));
    expect(Buffer.from(frame.subarray(16)).toString('ascii')).toBe(ciphertext);
  });

  it('decodes a response with a success and a failure, and refuses a truncated one', () => {
    const frame = hex(
      '53564346 01 81 0000 00000002 00000001 00000001 00000000' +
        '03e8 0000 0001 50 00000003 616263' +
        '07d0 0194 0000 00000008 6e6f7420686572',
    );
    // the last item says 8 bytes and carries 7: truncated
    expect(() => decodeResponseFrame('encrypt', frame)).toThrow(/truncated/);
    const whole = new Uint8Array([...frame, 0x65]);
    const decoded = decodeResponseFrame('encrypt', whole);
    expect(decoded.results).toEqual([
      { success: true, policyCode: 'P', data: Uint8Array.from(Buffer.from('abc')) },
      { success: false, status: 404, policyCode: undefined, error: 'not here' },
    ]);
    expect(() => decodeResponseFrame('decrypt', whole)).toThrow(/another operation/);
  });
});

describe('batches', () => {
  it('splits a batch by item count and keeps the results in order', async () => {
    const { fake, bodies } = recordingFetch(batchAnswer);
    const client = new EngineClient('http://engine.invalid/', { fetch: fake, maxBatchItems: 4 });
    const items = Array.from({ length: 10 }, (_, i) => ({ data: `v${i}`, policyCode: 'P' }));
    const answer = await client.encryptBatch(items);
    expect(bodies.map((body) => (JSON.parse(body) as { items: unknown[] }).items.length)).toEqual([4, 4, 2]);
    expect(answer.results.map((r) => r.originalData)).toEqual(items.map((i) => i.data));
    expect(answer).toMatchObject({ success: true, totalProcessed: 10, totalSuccess: 10, totalFailed: 0, totalProcessingTime: 3 });
  });

  it('splits a batch by body size, a lone item larger than the limit going alone', async () => {
    const { fake, bodies } = recordingFetch(batchAnswer);
    const client = new EngineClient('http://engine.invalid', { fetch: fake, maxBatchBytes: 100 });
    const items = ['a'.repeat(30), 'b'.repeat(30), 'c'.repeat(300), 'd'];
    await client.encryptBatch(items.map((data) => ({ data, policyCode: 'P' })));
    expect(bodies.map((body) => (JSON.parse(body) as { items: { data: string }[] }).items.map((i) => i.data[0]).join(''))).toEqual(['a', 'b', 'c', 'd']);
    for (const body of bodies.filter((b) => !b.includes('ccc'))) expect(Buffer.byteLength(body)).toBeLessThanOrEqual(100);
  });
});

describe('retries', () => {
  it('retries a 503 and not a 400, and carries the error body', async () => {
    const unavailable = recordingFetch((_, call) =>
      call < 3 ? Response.json({ error: 'crypto service is not configured' }, { status: 503 }) : Response.json({ success: true, data: 'hub:P:x', policyCode: 'P' }),
    );
    const client = new EngineClient('http://engine.invalid', { fetch: unavailable.fake, retry: { baseDelayMs: 1 } });
    await expect(client.encrypt({ data: 'a', policyCode: 'P' })).resolves.toMatchObject({ data: 'hub:P:x' });
    expect(unavailable.bodies).toHaveLength(3);

    const bad = recordingFetch(() => Response.json({ success: false, error: 'data must be a string' }, { status: 400 }));
    const failing = new EngineClient('http://engine.invalid', { fetch: bad.fake, retry: { baseDelayMs: 1 } });
    const error = await failing.encrypt({ data: 'a', policyCode: 'P' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineError);
    expect(error).toMatchObject({ status: 400, body: { success: false, error: 'data must be a string' } });
    expect(bad.bodies).toHaveLength(1);
  });

  it('retries a connection error until the engine answers, and not a malformed-URL TypeError', async () => {
    let calls = 0;
    const flaky = (async () => {
      calls += 1;
      if (calls < 3) throw new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
      return Response.json({ success: true, data: 'hub:P:x', policyCode: 'P' });
    }) as typeof fetch;
    const client = new EngineClient('http://engine.invalid', { fetch: flaky, retry: { baseDelayMs: 1 } });
    await expect(client.encrypt({ data: 'a', policyCode: 'P' })).resolves.toMatchObject({ success: true });
    expect(calls).toBe(3);

    let broken = 0;
    const malformed = (async () => {
      broken += 1;
      throw new TypeError('Failed to parse URL');
    }) as typeof fetch;
    const error = await new EngineClient('http://engine.invalid', { fetch: malformed, retry: { baseDelayMs: 1 } })
      .encrypt({ data: 'a', policyCode: 'P' })
      .catch((e: unknown) => e);
    expect(error).not.toBeInstanceOf(EngineConnectionError);
    expect(broken).toBe(1);
  });
});
