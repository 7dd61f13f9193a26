// The store (PostgreSQL through DATABASE_URL) goes away while the engine runs: execution keeps
// working from memory, changes are refused with a clear 503, and persistence catches up when the
// store returns (usage counters, and the hub's snapshot through the next heartbeat). The engine's
// connections go through a TCP proxy that is cut and restored: to the engine exactly a vanished
// server, without stopping the run's shared PostgreSQL.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { engineClient, eventually, keyVersionOf } from '../src/engine-client.js';
import { type SupervisedEngine, superviseEngine } from '../src/engine-supervisor.js';
import { type RunningHub, startHub } from '../src/hub-process.js';
import { createDatabase, dropDatabase, withClient } from '../src/postgres-harness.js';
import { startTcpProxy, type TcpProxy } from '../src/tcp-proxy.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_engine_faults_it';
const TENANT = 'tenant-store-faults';
const MASTER_KEY = randomBytes(32).toString('base64');

let storeUrl: string;
let proxy: TcpProxy;
let hub: RunningHub;
let engine: SupervisedEngine;
let client: ReturnType<typeof engineClient>;

beforeAll(async () => {
  storeUrl = await createDatabase(adminUrl, DB);
  const direct = new URL(storeUrl);
  proxy = await startTcpProxy(direct.hostname, Number(direct.port || 5432));
  const viaProxy = new URL(storeUrl);
  viaProxy.hostname = '127.0.0.1';
  viaProxy.port = String(proxy.port);
  hub = await startHub();
  await hub.admin('PUT', `/tenants/${TENANT}`, { masterKey: MASTER_KEY });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-gcm', algorithm: 'AES-256-GCM' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_EMAIL`, { algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' });
  engine = await superviseEngine({
    DATABASE_URL: viaProxy.toString(),
    SVC_MASTER_KEY: MASTER_KEY,
    SVC_HUB_HEARTBEAT_INTERVAL_MS: '200',
    SVC_HUB_BACKOFF_MAX_MS: '400',
    SVC_STORE_FLUSH_INTERVAL_MS: '200',
    SVC_STORE_TIMEOUT_MS: '1000',
  });
  client = engineClient(engine.url, TENANT, engine.opsUrl);
  await hub.admin('POST', `/tenants/${TENANT}/register`, { engineUrl: engine.opsUrl });
  await eventually('the engine applied the hub snapshot', async () => (await client.info()).cache.policyCount === 1);
});

afterAll(async () => {
  await engine?.dispose();
  await hub?.dispose();
  await proxy?.close();
  await dropDatabase(adminUrl, DB);
});

async function storedUsage(): Promise<number> {
  return withClient(storeUrl, async (c) => {
    const { rows } = await c.query<{ n: string }>(
      "select coalesce(sum(encryptions), 0) as n from svc_engine.key_usage where alias = 'pii-gcm'",
    );
    return Number(rows[0]?.n ?? 0);
  });
}

it('serves from memory while PostgreSQL is gone, refuses changes clearly, and catches up when it returns', async () => {
  const before = await client.encrypt('before the outage', 'PII_EMAIL');
  await proxy.cut();

  // Execution does not touch the store.
  expect(await client.decrypt(before)).toBe('before the outage');
  const during: string[] = [];
  for (let i = 0; i < 5; i++) during.push(await client.encrypt(`during ${i}`, 'PII_EMAIL'));
  expect(await client.decrypt(during[4] as string)).toBe('during 4');

  // A sync cannot be persisted: 503 with the reason, nothing applied.
  const sync = await client.ops('POST', '/cache/policies/sync', {
    policy: { policyCode: 'REFUSED', algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' },
  });
  expect(sync.status).toBe(503);
  expect(sync.body.success).toBe(false);
  expect(sync.body.error).toMatch(/^snapshot store unavailable: sync not applied \(.+\)$/);
  expect((await client.ops('GET', '/cache/status')).body).toEqual({ policyCount: 1, keyCount: 1 });
  const info = await client.info();
  expect(info.store.driver).toBe('postgres');
  expect(info.store.available).toBe(false);

  // A rotation at the hub arrives by heartbeat but is held back until it can be persisted.
  await hub.admin('POST', `/tenants/${TENANT}/keys/pii-gcm/rotate`);
  const target = (await hub.admin<{ runtimeVersion: string }>('GET', `/tenants/${TENANT}`)).runtimeVersion;
  await eventually('the engine reports it could not apply the snapshot', async () =>
    /snapshot store unavailable/.test((await client.info()).lastApplyError ?? ''),
  );
  expect(keyVersionOf(await client.encrypt('still v1', 'PII_EMAIL'))).toBe(1);

  await proxy.restore();
  await eventually('the store is available again', async () => (await client.info()).store.available === true);
  await eventually('the heartbeat applied the held-back rotation', async () => (await client.info()).runtimeVersion === target);
  expect((await client.info()).lastApplyError).toBeNull();
  const after = await client.encrypt('after the outage', 'PII_EMAIL');
  expect(keyVersionOf(after)).toBe(2);
  // Usage counted during the outage reached the store: 1 before + 5 during + 1 still-v1 at least.
  await eventually('usage counters were flushed', async () => (await storedUsage()) >= 7);

  // What was persisted after the outage survives a SIGKILL with the hub down.
  await engine.kill('SIGKILL');
  await hub.stop();
  await engine.start();
  expect((await client.info()).runtimeVersion).toBe(target);
  expect(await client.decrypt(before)).toBe('before the outage');
  expect(await client.decrypt(during[0] as string)).toBe('during 0');
  expect(await client.decrypt(after)).toBe('after the outage');
  await hub.start();
});

it('keeps key material wrapped in the PostgreSQL tables', async () => {
  const rows = await withClient(storeUrl, async (c) =>
    (await c.query<{ alias: string; version: string; n: number }>(
      'select alias, version, length(wrapped_material) as n from svc_engine.keys order by version',
    )).rows,
  );
  // 32-byte GCM keys wrap (RFC 5649) to 40 bytes.
  expect(rows.map((r) => [r.alias, Number(r.version), r.n])).toEqual([
    ['pii-gcm', 1, 40],
    ['pii-gcm', 2, 40],
  ]);
});
