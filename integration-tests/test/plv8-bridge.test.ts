// The plv8 bridge's generated function bodies, run under the plv8 shim against a real engine process:
// the same contract as the PL/Python bridge (results, NULLs, batching, SQLSTATEs, timeouts). The shim
// blocks this thread during each request, so every server the bridge talks to runs in another process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { startSilentServerProcess } from '../src/fault-proxy.js';
import { type Plv8Shim, type ShimError, startPlv8Shim } from '../src/plv8-shim.js';
import { POLICIES, POLICY_NAME, testBootstrap } from '../src/test-policies.js';
import { STATEMENTS } from '../../udf/src/plv8/bridge.js';

const CIPHERTEXT = /^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$/;

let engine: RunningEngine;
let shim: Plv8Shim;
let statements = 0;

/**
 * A server svc_engine on `wrapper` with this url (and ops_url) in the shim's catalog, and the array the SQL
 * wrappers pass for a new statement with these settings: [statement start, timeout_ms, batch_size].
 */
function at(url: string | null, timeoutMs: string | null = null, batchSize: string | null = null, opsUrl: string | null = null, wrapper = 'svc_bridge_fdw') {
  const options = [...(url === null ? [] : [`url=${url}`]), ...(opsUrl === null ? [] : [`ops_url=${opsUrl}`])];
  shim.setServer({ wrapper, options });
  return [`statement ${++statements}`, timeoutMs, batchSize];
}

/** The settings of a new statement against the test engine. */
const cfg = () => at(engine.url);

function failure(run: () => unknown): ShimError {
  try {
    run();
  } catch (error) {
    return error as ShimError;
  }
  throw new Error('expected the call to fail');
}

beforeAll(async () => {
  engine = await startEngine({ bootstrap: testBootstrap() });
  shim = startPlv8Shim();
});

afterAll(async () => {
  await shim?.close();
  await engine?.dispose();
});

describe('plv8 bridge under the shim', () => {
  it('round-trips with both algorithms, and encrypts by name at the latest or a given version', () => {
    const gcm = shim.call('svc__encrypt', 'bob@example.com', POLICIES.random, cfg()) as string;
    const siv1 = shim.call('svc__encrypt', 'bob@example.com', POLICIES.deterministic, cfg());
    const siv2 = shim.call('svc__encrypt', 'bob@example.com', POLICIES.deterministic, cfg());
    expect(gcm).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
    expect(siv1).toBe(siv2);
    expect(shim.call('svc__decrypt', gcm, cfg())).toBe('bob@example.com');
    expect(shim.call('svc__decrypt', siv1, cfg())).toBe('bob@example.com');
    expect(shim.call('svc__encrypt_by_name', 'x', POLICY_NAME, null, cfg())).toMatch(new RegExp(`^hub:${POLICIES.namedV2}:`));
    expect(shim.call('svc__encrypt_by_name', 'x', POLICY_NAME, 1, cfg())).toMatch(new RegExp(`^hub:${POLICIES.namedV1}:`));
    expect(shim.call('svc__encrypt_by_name', null, POLICY_NAME, null, cfg())).toBeNull();
  });

  it('round-trips the empty string, Unicode and a 1 MB value', () => {
    for (const value of ['', 'Zoë · 東京 · 🙂', 'y'.repeat(1024 * 1024)]) {
      const enc = shim.call('svc__encrypt', value, POLICIES.random, cfg());
      expect(shim.call('svc__decrypt', enc, cfg()) === value).toBe(true);
    }
  });

  it('keeps order and NULL elements of arrays, in requests of svc.batch_size', () => {
    const values = Array.from({ length: 20 }, (_, i) => (i % 5 === 0 ? null : `v${i}`));
    const requests = () => shim.executed.filter((sql) => sql.includes('http_request')).length;
    const before = requests();
    const enc = shim.call('svc__encrypt_array', values, POLICIES.random, at(engine.url, null, '4')) as Array<
      string | null
    >;
    // 16 non-NULL values in requests of 4.
    expect(requests() - before).toBe(4);
    enc.forEach((v, i) => (values[i] === null ? expect(v).toBeNull() : expect(v).toMatch(CIPHERTEXT)));
    expect(shim.call('svc__decrypt_array', enc, cfg())).toEqual(values);
    expect(shim.call('svc__encrypt_array', [], POLICIES.random, cfg())).toEqual([]);
    expect(failure(() => shim.call('svc__encrypt_array', [['a'], ['b']], POLICIES.random, cfg()))).toMatchObject({
      sqlerrcode: '2202E',
      message: 'svc_encrypt: only one-dimensional arrays are supported',
    });
  });

  it('collects an array "sent ahead" only with the arguments it was sent with, once', () => {
    const values = ['ahead', null, 'later'];
    expect(shim.call('svc__array_send', 'encrypt', values, POLICIES.random, cfg())).toBe(2);
    const notSent = { sqlerrcode: '55000', message: 'svc_array_collect: this session has no array sent ahead with these arguments' };
    expect(failure(() => shim.call('svc__array_collect', 'encrypt', ['other'], POLICIES.random, cfg()))).toMatchObject(notSent);
    const enc = shim.call('svc__array_collect', 'encrypt', values, POLICIES.random, cfg()) as Array<string | null>;
    expect(enc[1]).toBeNull();
    expect(failure(() => shim.call('svc__array_collect', 'encrypt', values, POLICIES.random, cfg()))).toMatchObject(notSent);
    shim.call('svc__array_send', 'decrypt', enc, null, cfg());
    expect(shim.call('svc__array_collect', 'decrypt', enc, null, cfg())).toEqual(values);
    expect(failure(() => shim.call('svc__array_send', 'decrypt', enc, POLICIES.random, cfg()))).toMatchObject({
      sqlerrcode: '22023',
      message: 'svc_array_send: decrypt takes no policy code',
    });

    // Two ahead at once, collected in any order (a bulk procedure sends chunk k+1 before collecting chunk k);
    // a third send discards the oldest.
    for (const v of ['one', 'two', 'three']) shim.call('svc__array_send', 'encrypt', [v], POLICIES.random, cfg());
    expect(failure(() => shim.call('svc__array_collect', 'encrypt', ['one'], POLICIES.random, cfg()))).toMatchObject(notSent);
    const three = shim.call('svc__array_collect', 'encrypt', ['three'], POLICIES.random, cfg()) as string[];
    const two = shim.call('svc__array_collect', 'encrypt', ['two'], POLICIES.random, cfg()) as string[];
    expect(shim.call('svc__decrypt_array', [...two, ...three], cfg())).toEqual(['two', 'three']);
  });

  it('raises SV001 with the engine message for an unknown policy and a tampered ciphertext', () => {
    const unknown = failure(() => shim.call('svc__encrypt', 'x', 'NO_SUCH_POLICY', cfg()));
    expect(unknown).toMatchObject({ sqlerrcode: 'SV001', message: 'svc_encrypt: policy not found: NO_SUCH_POLICY' });
    const enc = shim.call('svc__encrypt', 'secret', POLICIES.random, cfg()) as string;
    const tampered = `${enc.slice(0, -2)}${enc.at(-2) === 'A' ? 'B' : 'A'}${enc.at(-1)}`;
    const failed = failure(() => shim.call('svc__decrypt', tampered, cfg()));
    expect(failed).toMatchObject({ sqlerrcode: 'SV001', message: 'svc_decrypt: decryption failed' });
    const inArray = failure(() => shim.call('svc__decrypt_array', ['garbage', null, enc], cfg()));
    expect(inArray).toMatchObject({ sqlerrcode: 'SV001', detail: 'item 1 of 2' });
  });

  it('reads the server once per statement: a new statement sees a changed address, the running one keeps its own', () => {
    const lookups = () => shim.executed.filter((sql) => sql === STATEMENTS.server).length;
    const statement = cfg();
    const before = lookups();
    expect(shim.call('svc__encrypt', 'a', POLICIES.random, statement)).toMatch(CIPHERTEXT);
    expect(shim.call('svc__encrypt', 'b', POLICIES.random, statement)).toMatch(CIPHERTEXT);
    expect(lookups()).toBe(before + 1);
    shim.setServer({ wrapper: 'svc_bridge_fdw', options: ['url=http://127.0.0.1:1'] });
    expect(shim.call('svc__encrypt', 'c', POLICIES.random, statement)).toMatch(CIPHERTEXT);
    const next = failure(() => shim.call('svc__encrypt', 'd', POLICIES.random, [`statement ${++statements}`, null, null]));
    expect(next.message).toContain('engine at http://127.0.0.1:1 is unreachable');
    expect(lookups()).toBe(before + 2);
  });

  it('raises SV003 for a missing or wrong server, a missing or invalid address, and an invalid setting', () => {
    shim.setServer(null);
    expect(failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, [`statement ${++statements}`, null, null]))).toMatchObject({
      sqlerrcode: 'SV003',
      message: 'the foreign server svc_engine that holds the engine address does not exist',
    });
    expect(failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, at(engine.url, null, null, null, 'dblink_fdw')))).toMatchObject({
      sqlerrcode: 'SV003',
      message: 'the foreign server svc_engine is on the foreign-data wrapper dblink_fdw, not svc_bridge_fdw',
    });
    expect(failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, at(null)))).toMatchObject({
      sqlerrcode: 'SV003',
      message: 'the foreign server svc_engine has no option url',
    });
    expect(failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, at(engine.url, '-5')))).toMatchObject({
      sqlerrcode: 'SV003',
      message: 'svc.timeout_ms must be an integer from 1 to 3600000, got "-5"',
    });
    expect(failure(() => shim.call('svc__decrypt', 'x', at('localhost:1'))).sqlerrcode).toBe('SV003');
    expect(failure(() => shim.call('svc__engine_info', at(engine.url, null, null, 'ops:1'))).sqlerrcode).toBe('SV003');
  });

  it('raises SV002 when the engine is down or does not answer within svc.timeout_ms', async () => {
    const down = failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, at('http://127.0.0.1:1')));
    expect(down.sqlerrcode).toBe('SV002');
    expect(down.message).toContain('engine at http://127.0.0.1:1 is unreachable');
    const silent = await startSilentServerProcess();
    try {
      const slow = failure(() => shim.call('svc__encrypt', 'x', POLICIES.random, at(silent.url, '300')));
      expect(slow).toMatchObject({
        sqlerrcode: 'SV002',
        message: `engine at ${silent.url} did not answer within svc.timeout_ms (300 ms)`,
      });
    } finally {
      silent.stop();
    }
  });

  it('reports health and engine info', () => {
    expect(shim.call('svc__health', cfg())).toMatchObject({ status: 'UP' });
    expect(shim.call('svc__engine_info', at(engine.url, '1234', '77', engine.opsUrl))).toMatchObject({
      bridge: 'plv8',
      engineServer: 'svc_engine',
      engineUrl: engine.url,
      opsUrl: engine.opsUrl,
      timeoutMs: 1234,
      batchSize: 77,
      health: { status: 'UP' },
    });
  });
});
