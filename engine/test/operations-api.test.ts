// The operations API through app.inject: identity registration rules, the tenant header scope,
// 405s, cache status/clear, the three sync payload shapes with atomic rejection, heartbeat,
// sync check, runtime info, stats connection test and /metrics. Exact bodies from spec section 7.2.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { wrapKey } from '../src/core/key-wrap.js';
import { closeSharedDb, HUB_URL, TENANT } from './support/hub-fixtures.js';
import { OPS, type OperationsWorld, operationsWorld } from './support/operations-fixtures.js';

let w: OperationsWorld | undefined;

afterEach(async () => {
  await w?.close();
  w = undefined;
});

afterAll(closeSharedDb);

const auth = { 'x-svc-tenant-id': TENANT };
const json = { 'content-type': 'application/json' };

function call(
  world: OperationsWorld,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  body?: unknown,
  headers: Record<string, string> = auth,
) {
  return world.engine.app.inject({
    method,
    url: `${OPS}${path}`,
    headers: body === undefined ? headers : { ...headers, ...json },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
}

const policy = (code: string, extra: Record<string, unknown> = {}) => ({
  policyCode: code,
  policyName: code.toLowerCase(),
  policyVersion: 1,
  algorithm: 'AES-256-GCM',
  keyAlias: 'ops-gcm',
  status: 'ACTIVE',
  ...extra,
});

function wrappedKey(world: OperationsWorld, version: number, material = randomBytes(32)) {
  return {
    record: {
      alias: 'ops-gcm',
      version,
      algorithm: 'AES-256-GCM',
      status: 'ACTIVE',
      wrappedMaterial: wrapKey(world.masterKey, material).toString('base64'),
    },
    material,
  };
}

describe('runtime identity', () => {
  it('registers without a header, accepts the same identity again, refuses another hub URL with 409', async () => {
    w = await operationsWorld({ registered: false });
    const first = await call(w, 'POST', '/runtime/identity', { hubUrl: HUB_URL, tenantId: TENANT }, {});
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ success: true });
    expect((await call(w, 'POST', '/runtime/identity', { hubUrl: HUB_URL, tenantId: TENANT }, {})).statusCode).toBe(200);
    const moved = await call(w, 'POST', '/runtime/identity', { hubUrl: 'http://other-hub:9100', tenantId: TENANT });
    expect(moved.statusCode).toBe(409);
    expect(moved.body).toBe('{"error":"runtime identity hubUrl cannot be changed through registration"}');
  });

  it('answers 400 for an invalid hub URL or an empty tenant', async () => {
    w = await operationsWorld({ registered: false });
    const badUrl = await call(w, 'POST', '/runtime/identity', { hubUrl: 'hub:9100', tenantId: TENANT }, {});
    expect(badUrl.statusCode).toBe(400);
    expect(badUrl.json()).toEqual({ error: 'hubUrl must be an absolute http or https URL' });
    const noTenant = await call(w, 'POST', '/runtime/identity', { hubUrl: HUB_URL, tenantId: '' }, {});
    expect(noTenant.statusCode).toBe(400);
    expect(noTenant.json().error).toMatch(/^tenantId must be/);
  });

  it('refuses a tenant change from a stranger (401 unauthorized) and accepts it with the current tenant header', async () => {
    w = await operationsWorld();
    const stranger = await call(w, 'POST', '/runtime/identity', { hubUrl: HUB_URL, tenantId: 'evil' }, {});
    expect(stranger.statusCode).toBe(401);
    expect(stranger.body).toBe('unauthorized');
    expect(stranger.headers['content-type']).toMatch(/^text\/plain/);
    const owner = await call(w, 'POST', '/runtime/identity', { hubUrl: HUB_URL, tenantId: 'tenant-2' });
    expect(owner.statusCode).toBe(200);
    expect((await call(w, 'GET', '/cache/status', undefined, { 'x-svc-tenant-id': 'tenant-2' })).statusCode).toBe(200);
    expect((await call(w, 'GET', '/cache/status')).statusCode).toBe(401);
  });
});

describe('tenant header scope', () => {
  it('answers 503 on every guarded path before an identity is registered', async () => {
    w = await operationsWorld({ registered: false });
    for (const [method, path] of [
      ['GET', '/runtime/info'],
      ['GET', '/cache/status'],
      ['POST', '/cache/clear'],
      ['POST', '/runtime/heartbeat'],
      ['GET', '/cache/sync-check'],
    ] as const) {
      const response = await call(w, method, path);
      expect(response.statusCode, path).toBe(503);
      expect(response.body).toBe('{"error":"runtime identity is not configured"}');
    }
  });

  it('answers 401 with the text body unauthorized for a missing or wrong header', async () => {
    w = await operationsWorld();
    const cases: Record<string, string>[] = [{}, { 'x-svc-tenant-id': 'tenant-test-2' }, { 'x-svc-tenant-id': '' }];
    for (const headers of cases) {
      const response = await call(w, 'GET', '/cache/status', undefined, headers);
      expect(response.statusCode).toBe(401);
      expect(response.body).toBe('unauthorized');
    }
  });

  it('answers 405 for a wrong method on an operations path', async () => {
    w = await operationsWorld();
    for (const [method, path] of [
      ['GET', '/cache/clear'],
      ['DELETE', '/runtime/identity'],
      ['PUT', '/cache/policies/sync'],
      ['POST', '/cache/status'],
    ] as const) {
      const response = await call(w, method, path);
      expect(response.statusCode, `${method} ${path}`).toBe(405);
      expect(response.json()).toEqual({ error: 'method not allowed' });
    }
  });
});

describe('cache sync', () => {
  it('accepts the single, array and items shapes for policies and keys, and counts them', async () => {
    w = await operationsWorld();
    const k1 = wrappedKey(w, 1).record;
    const k2 = wrappedKey(w, 2).record;
    const k3 = wrappedKey(w, 3).record;
    const results = [
      await call(w, 'POST', '/cache/keys/sync', { key: k1 }),
      await call(w, 'POST', '/cache/keys/sync', { keys: [k2] }),
      await call(w, 'POST', '/cache/keys/sync', { items: [k3] }),
      await call(w, 'POST', '/cache/policies/sync', { policy: policy('A') }),
      await call(w, 'POST', '/cache/policies/sync', { policies: [policy('B'), policy('C')] }),
      await call(w, 'POST', '/cache/policies/sync', { items: [policy('D')] }),
    ];
    expect(results.map((r) => r.json())).toEqual([
      { success: true, count: 1 },
      { success: true, count: 1 },
      { success: true, count: 1 },
      { success: true, count: 1 },
      { success: true, count: 2 },
      { success: true, count: 1 },
    ]);
    expect((await call(w, 'GET', '/cache/status')).json()).toEqual({ policyCount: 4, keyCount: 3 });
  });

  it('upserts on sync and replaces on sync-all', async () => {
    w = await operationsWorld();
    await call(w, 'POST', '/cache/policies/sync', { policies: [policy('A'), policy('B')] });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('A', { status: 'DISABLED' }) });
    expect(w.manager.cache.current.policyByCode('A')?.status).toBe('DISABLED');
    expect((await call(w, 'POST', '/cache/policies/sync-all', { items: [policy('C')] })).json()).toEqual({
      success: true,
      count: 1,
    });
    // Records a full sync leaves out are RETIRED (decrypt only), never dropped; DISABLED stays DISABLED.
    const statuses = () => Object.fromEntries(w?.manager.cache.current.policies.map((p) => [p.policyCode, p.status]) ?? []);
    expect(statuses()).toEqual({ A: 'DISABLED', B: 'RETIRED', C: 'ACTIVE' });
    expect((await call(w, 'GET', '/cache/status')).json()).toEqual({ policyCount: 2, keyCount: 0 });
    const second = wrappedKey(w, 2).record;
    await call(w, 'POST', '/cache/keys/sync', { keys: [wrappedKey(w, 1).record, second] });
    await call(w, 'POST', '/cache/keys/sync-all', { keys: [wrappedKey(w, 3).record] });
    expect(w.manager.cache.current.keys.map((k) => `${k.version}:${k.status}`).sort()).toEqual([
      '1:RETIRED',
      '2:RETIRED',
      '3:ACTIVE',
    ]);
    // A later sync listing a retired version restores it.
    await call(w, 'POST', '/cache/keys/sync', { keys: [second] });
    expect(w.manager.cache.current.key('ops-gcm', 2)?.status).toBe('ACTIVE');
    // ...but never with other material under the same version.
    const swapped = await call(w, 'POST', '/cache/keys/sync', { keys: [wrappedKey(w, 2).record] });
    expect(swapped.statusCode).toBe(409);
    expect(swapped.json().error).toMatch(/^key ops-gcm version 2 already holds other material/);
  });

  it('answers 400 with the spec message for an empty payload (and the matching one for keys)', async () => {
    w = await operationsWorld();
    for (const body of [{}, { policies: [] }, { items: [] }]) {
      const response = await call(w, 'POST', '/cache/policies/sync', body);
      expect(response.statusCode).toBe(400);
      expect(response.body).toBe('{"error":"policy sync request has no policies"}');
    }
    for (const body of [{}, { keys: [] }, { items: [] }]) {
      const response = await call(w, 'POST', '/cache/keys/sync-all', body);
      expect(response.statusCode).toBe(400);
      expect(response.body).toBe('{"error":"key sync request has no keys"}');
    }
  });

  it('rejects a payload with one invalid entry whole, naming the entry, and changes nothing', async () => {
    w = await operationsWorld();
    await call(w, 'POST', '/cache/policies/sync', { items: [policy('KEEP')] });
    const before = w.manager.cache.current;
    const response = await call(w, 'POST', '/cache/policies/sync-all', {
      items: [policy('NEW'), policy('BAD', { algorithm: 'ROT13' })],
    });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ error: 'items[1]: algorithm must be one of AES-256-GCM, AES-256-SIV' });
    expect(w.manager.cache.current).toBe(before);
    expect((await w.store.load()).snapshot.policies.map((p) => p.policyCode)).toEqual(['KEEP']);

    const badKey = { ...wrappedKey(w, 2).record, wrappedMaterial: wrapKey(randomBytes(32), randomBytes(32)).toString('base64') };
    const keys = await call(w, 'POST', '/cache/keys/sync', { keys: [wrappedKey(w, 1).record, badKey] });
    expect(keys.statusCode).toBe(400);
    expect(keys.json()).toEqual({ error: "keys[1]: wrappedMaterial does not unwrap under the engine's master key" });
    expect(w.manager.cache.current.keyCount).toBe(0);
  });

  it('refuses raw key material unless the engine allows it', async () => {
    w = await operationsWorld();
    const raw = { alias: 'ops-gcm', version: 1, algorithm: 'AES-256-GCM', material: randomBytes(32).toString('base64') };
    const refused = await call(w, 'POST', '/cache/keys/sync', { key: raw });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error).toMatch(/^key: raw key material is refused/);
    await w.close();
    w = await operationsWorld({ allowRawMaterial: true });
    expect((await call(w, 'POST', '/cache/keys/sync', { key: raw })).json()).toEqual({ success: true, count: 1 });
  });

  it('clears the cache: encryption stops until the next sync, old ciphertexts still decrypt', async () => {
    w = await operationsWorld();
    await call(w, 'POST', '/cache/keys/sync', { key: wrappedKey(w, 1).record });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('P') });
    const encrypt = () =>
      w?.engine.app.inject({ method: 'POST', url: '/api/encrypt', headers: json, payload: { data: 'x', policyCode: 'P' } });
    const sealed = await encrypt();
    expect(sealed?.statusCode).toBe(200);
    expect((await call(w, 'POST', '/cache/clear')).json()).toEqual({ success: true });
    expect((await call(w, 'GET', '/cache/status')).json()).toEqual({ policyCount: 0, keyCount: 0 });
    const refused = await encrypt();
    expect(refused?.statusCode).toBe(409);
    expect(refused?.json().error).toMatch(/^policy P is retired/);
    const opened = await w.engine.app.inject({
      method: 'POST',
      url: '/api/decrypt',
      headers: json,
      payload: { data: sealed?.json().data },
    });
    expect(opened.json()).toEqual({ success: true, data: 'x', policyCode: 'P' });
    const stored = (await w.store.load()).snapshot;
    expect(stored.runtimeVersion).toBe('');
    expect(stored.policies.map((p) => p.status)).toEqual(['RETIRED']);
    expect(stored.keys.map((k) => k.status)).toEqual(['RETIRED']);
  });

  it('reports a store outage on sync clearly (503) and changes nothing', async () => {
    w = await operationsWorld();
    w.store.failing = true;
    const response = await call(w, 'POST', '/cache/policies/sync', { policy: policy('P') });
    expect(response.statusCode).toBe(503);
    expect(response.json()).toEqual({
      success: false,
      error: 'snapshot store unavailable: sync not applied (connect ECONNREFUSED 127.0.0.1:5432)',
    });
    expect(w.manager.cache.current.policyCount).toBe(0);
    const info = (await call(w, 'GET', '/runtime/info')).json();
    expect(info.store).toEqual({ driver: 'pglite', available: false, lastError: 'connect ECONNREFUSED 127.0.0.1:5432' });
  });
});

describe('heartbeat, sync check and runtime info', () => {
  it('heartbeats through the operations API and applies the hub snapshot', async () => {
    w = await operationsWorld();
    const response = await call(w, 'POST', '/runtime/heartbeat');
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ success: true, runtimeChanged: true, applied: true, policyCount: 1, keyCount: 1 });
    expect((await call(w, 'GET', '/cache/sync-check')).json()).toMatchObject({ inSync: true });
  });

  it('answers 502 with the detail when the hub is down', async () => {
    w = await operationsWorld();
    w.hubControl.down = true;
    const response = await call(w, 'POST', '/runtime/heartbeat');
    expect(response.statusCode).toBe(502);
    expect(response.body).toBe('{"success":false,"error":"hub heartbeat failed: ECONNREFUSED"}');
    expect((await call(w, 'GET', '/cache/sync-check')).statusCode).toBe(502);
  });

  it('describes the engine: version, status, provider, capabilities, counts, times and key usage', async () => {
    w = await operationsWorld();
    const before = (await call(w, 'GET', '/runtime/info')).json();
    expect(before).toMatchObject({ engineVersion: '9.9.9-test', status: 'OFFLINE', hubUrl: HUB_URL, lastHeartbeatAt: null });
    await call(w, 'POST', '/runtime/heartbeat');
    await w.engine.app.inject({ method: 'POST', url: '/api/encrypt', headers: json, payload: { data: 'x', policyCode: 'PII_EMAIL' } });
    const info = (await call(w, 'GET', '/runtime/info')).json();
    expect(info).toMatchObject({
      status: 'ONLINE',
      providerFamily: 'software',
      capabilities: ['AES-256-GCM', 'AES-256-SIV'],
      runtimeVersion: w.manager.cache.current.runtimeVersion,
      cache: { policyCount: 1, keyCount: 1 },
      lastHeartbeatError: null,
      store: { driver: 'pglite', available: true, lastError: null },
      keyUsage: [{ alias: 'pii-gcm', version: 1, algorithm: 'AES-256-GCM', encryptions: 1, decryptions: 0, nearLimit: false }],
      keyUsageWarning: false,
    });
    expect(Date.parse(info.lastHeartbeatAt)).not.toBeNaN();
    expect(Date.parse(info.lastSyncAt)).not.toBeNaN();
    expect(JSON.stringify(info)).not.toContain(TENANT);
  });

  it('flags a GCM key version near the 2^32 limit in runtime info and metrics', async () => {
    w = await operationsWorld();
    await call(w, 'POST', '/runtime/heartbeat');
    w.manager.cache.counters.cell('pii-gcm', 1).encryptions = 2 ** 31;
    const info = (await call(w, 'GET', '/runtime/info')).json();
    expect(info.keyUsageWarning).toBe(true);
    expect(info.keyUsage[0].nearLimit).toBe(true);
    const metrics = await w.engine.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toContain('svc_key_near_limit{alias="pii-gcm",version="1"} 1');
  });
});

describe('stats test connection', () => {
  let server: Server | undefined;

  afterEach(async () => {
    await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
    server = undefined;
  });

  it('rejects a missing, malformed or non-http target with 400', async () => {
    w = await operationsWorld();
    for (const query of ['', '?statsTargetUrl=', '?statsTargetUrl=not-a-url', '?statsTargetUrl=ftp%3A%2F%2Fhost%2Fx']) {
      const response = await call(w, 'GET', `/stats/test-connection${query}`);
      expect(response.statusCode, query).toBe(400);
      expect(response.json()).toEqual({ error: 'statsTargetUrl must be an absolute http or https URL' });
    }
  });

  it('refuses a target carrying credentials with 400, never echoing them or calling the target', async () => {
    w = await operationsWorld();
    let calls = 0;
    server = createServer((_req, res) => {
      calls += 1;
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    for (const userinfo of ['statsuser:s3cr3t-pw@', 'statsuser@', ':s3cr3t-pw@']) {
      const url = encodeURIComponent(`http://${userinfo}127.0.0.1:${port}/stats`);
      const response = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=${url}`);
      expect(response.statusCode, userinfo).toBe(400);
      expect(response.json()).toEqual({ error: 'statsTargetUrl must not carry credentials' });
      expect(response.body).not.toMatch(/statsuser|s3cr3t-pw/);
    }
    expect(calls).toBe(0);
  });

  /** A local stats server answering 204; its port. */
  async function statsServer(): Promise<number> {
    server = createServer((_req, res) => res.writeHead(204).end());
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    return (server.address() as AddressInfo).port;
  }

  it('reports a reachable target, and a refused or unresolvable one the same way, without status or timing', async () => {
    w = await operationsWorld();
    const port = await statsServer();
    const target = encodeURIComponent(`http://127.0.0.1:${port}/stats?token=secret-token#frag`);
    const up = (await call(w, 'GET', `/stats/test-connection?statsTargetUrl=${target}`)).json();
    expect(up).toEqual({ success: true, statsTargetUrl: `http://127.0.0.1:${port}/stats`, reachable: true, error: null });
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
    for (const url of [`http://127.0.0.1:${port}/stats`, 'http://no-such-host.invalid/stats']) {
      const down = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=${encodeURIComponent(url)}`);
      expect(down.statusCode, url).toBe(200);
      expect(down.json()).toEqual({
        success: false,
        statsTargetUrl: url,
        reachable: false,
        error: 'connection failed',
      });
    }
  });

  it('refuses link-local and metadata targets with 400, by address, by name and after resolution', async () => {
    const resolved: Record<string, string> = { 'stats.example': '169.254.169.254', 'v6.example': 'fe80::1' };
    w = await operationsWorld({
      stats: { statsResolver: async (host) => [{ address: resolved[host] ?? '192.0.2.1', family: host.startsWith('v6') ? 6 : 4 }] },
    });
    const targets = [
      'http://169.254.169.254/latest/meta-data/',
      'http://169.254.1.1:8080/',
      'http://[fe80::1]/',
      'http://[fd00:ec2::254]/',
      'http://[::ffff:169.254.169.254]/',
      'http://0.0.0.0:9400/',
      'http://metadata.google.internal/computeMetadata/v1/',
      'http://METADATA.google.internal./',
      'http://stats.example/',
      'http://v6.example/',
    ];
    for (const url of targets) {
      const response = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=${encodeURIComponent(url)}`);
      expect(response.statusCode, url).toBe(400);
      expect(response.json()).toEqual({ error: 'statsTargetUrl is not an allowed target' });
    }
  });

  it('connects to the address it vetted, not to a second resolution of the name', async () => {
    const port = await statsServer();
    let lookups = 0;
    w = await operationsWorld({
      stats: {
        statsResolver: async () => {
          lookups += 1;
          return [{ address: '127.0.0.1', family: 4 }];
        },
      },
    });
    // The name exists only in the resolver: reaching the local server proves the connection used it.
    const response = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=http://stats.example:${port}/`);
    expect(response.json()).toMatchObject({ success: true, reachable: true });
    expect(lookups).toBe(1);
  });

  it('calls only the configured targets when SVC_STATS_ALLOWED_TARGETS is set, link-local included if listed', async () => {
    const port = await statsServer();
    w = await operationsWorld({ stats: { statsAllowedTargets: [`127.0.0.1:${port}`, '169.254.10.10'] } });
    const listed = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=http://127.0.0.1:${port}/`);
    expect(listed.json()).toMatchObject({ success: true, reachable: true });
    const otherPort = await call(w, 'GET', `/stats/test-connection?statsTargetUrl=http://127.0.0.1:${port + 1}/`);
    expect(otherPort.statusCode).toBe(400);
    expect(otherPort.json()).toEqual({ error: 'statsTargetUrl is not an allowed target' });
    const linkLocal = await call(w, 'GET', '/stats/test-connection?statsTargetUrl=http://169.254.10.10:1/');
    expect(linkLocal.statusCode).toBe(200);
  });

  it('never writes the query of a request URL (a token in statsTargetUrl) into the request log', async () => {
    w = await operationsWorld();
    const target = encodeURIComponent('http://127.0.0.1:1/stats?token=secret-token');
    await call(w, 'GET', `/stats/test-connection?statsTargetUrl=${target}&other=secret-other`);
    const logged = w.logs.join('');
    expect(logged).toContain('"path":"/engine/api/v1/stats/test-connection"');
    expect(logged).not.toMatch(/secret-token|secret-other|statsTargetUrl/);
  });
});

describe('metrics', () => {
  it('exposes request counts by route template and per key version usage in the Prometheus format', async () => {
    w = await operationsWorld();
    await call(w, 'POST', '/runtime/heartbeat');
    for (let i = 0; i < 2; i++) {
      await w.engine.app.inject({ method: 'POST', url: '/api/encrypt', headers: json, payload: { data: 'x', policyCode: 'PII_EMAIL' } });
    }
    const response = await w.engine.app.inject({ method: 'GET', url: '/metrics' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^text\/plain/);
    expect(response.body).toContain('svc_http_requests_total{method="POST",route="/api/encrypt",status="200"} 2');
    expect(response.body).toContain('svc_key_encryptions_total{alias="pii-gcm",version="1"} 2');
    expect(response.body).toContain('svc_cache_entries{kind="policy"} 1');
    expect(response.body).toMatch(/^svc_nodejs_eventloop_lag_max_seconds \d/m);
    expect(response.body).toContain('svc_engine_info{version="9.9.9-test",status="ONLINE"} 1');
    expect(response.body).toMatch(/svc_http_request_duration_seconds_bucket\{le="[^"]+",method="POST",route="\/api\/encrypt"\}/);
  });
});
