// Key and policy states against the takeover and accident scenarios: a stranger hub's empty snapshot
// is held back and, even when applied, only retires records (old ciphertexts still decrypt, also
// after a restart); registration pinned to a hub or guarded by a token; DISABLED, RETIRED and
// DESTROYED kept apart; the minimum decryption version; ill-formed runtime versions refused.
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type AuditEvent, type AuditSink, AuditTrail } from '../src/core/audit.js';
import { ExecutionService } from '../src/core/execution-service.js';
import { wrapKey } from '../src/core/key-wrap.js';
import { RuntimeCache } from '../src/core/runtime-cache.js';
import type { FetchLike } from '../src/hub/hub-client.js';
import { registerHubMetrics } from '../src/hub/hub-metrics.js';
import { CacheManager } from '../src/store/cache-manager.js';
import { silentLogger } from '../src/store/logger.js';
import { SnapshotStore } from '../src/store/snapshot-store.js';
import { closeSharedDb, HUB_URL, sharedDb, TENANT } from './support/hub-fixtures.js';
import { TEST_LIMITS } from './support/http.js';
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
  method: 'GET' | 'POST',
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

const keyRecord = (world: OperationsWorld, version: number, material: Buffer, extra: Record<string, unknown> = {}) => ({
  alias: 'ops-gcm',
  version,
  algorithm: 'AES-256-GCM',
  status: 'ACTIVE',
  wrappedMaterial: wrapKey(world.masterKey, material).toString('base64'),
  ...extra,
});

async function encrypt(world: OperationsWorld, data: string, policyCode = 'P') {
  return world.engine.app.inject({ method: 'POST', url: '/api/encrypt', headers: json, payload: { data, policyCode } });
}

async function decrypt(world: OperationsWorld, data: string) {
  return world.engine.app.inject({ method: 'POST', url: '/api/decrypt', headers: json, payload: { data } });
}

/** A hub of a stranger's own: it answers every heartbeat with runtimeChanged and an empty snapshot. */
const strangerHub: FetchLike = async () =>
  new Response(
    JSON.stringify({
      runtimeVersion: 'stranger-1',
      runtimeChanged: true,
      snapshot: { policies: [], keys: [] },
      serverTime: new Date().toISOString(),
    }),
    { status: 200, headers: { 'content-type': 'application/json' } },
  );

/** Two key versions and a policy, loaded the way a hub's syncs load them. */
async function loadRuntime(world: OperationsWorld): Promise<{ v1: Buffer; v2: Buffer }> {
  const v1 = randomBytes(32);
  const v2 = randomBytes(32);
  expect((await call(world, 'POST', '/cache/keys/sync', { keys: [keyRecord(world, 1, v1), keyRecord(world, 2, v2)] })).statusCode).toBe(200);
  expect((await call(world, 'POST', '/cache/policies/sync', { items: [policy('P')], runtimeVersion: 'real-7' })).statusCode).toBe(200);
  return { v1, v2 };
}

describe('a stranger hub answering with an empty snapshot', () => {
  it('is held back, reported, and even when applied never makes old ciphertexts undecryptable (also after a restart)', async () => {
    w = await operationsWorld({ fetch: strangerHub });
    registerHubMetrics(w.metrics.registry, w.agent);
    await loadRuntime(w);
    const sealed = (await encrypt(w, 'alice@example.com')).json().data as string;

    const beat = await call(w, 'POST', '/runtime/heartbeat');
    expect(beat.statusCode).toBe(200);
    expect(beat.json()).toMatchObject({ applied: false, runtimeVersion: 'real-7', policyCount: 1, keyCount: 2 });
    const info = (await call(w, 'GET', '/runtime/info')).json();
    expect(info.heldBackSnapshot).toMatchObject({
      runtimeVersion: 'stranger-1',
      policyCount: 0,
      keyCount: 0,
      retiredKeys: 2,
      retiredPolicies: 1,
      reason: 'it would retire all 2 live key versions',
    });
    expect(info.lastApplyError).toMatch(/^snapshot held back/);
    expect(w.logs.join('')).toContain('hub snapshot HELD BACK');
    expect((await w.engine.app.inject({ method: 'GET', url: '/metrics' })).body).toMatch(/^svc_hub_snapshot_held_back 1$/m);
    expect((await encrypt(w, 'still served')).statusCode).toBe(200);

    // The operator applies it anyway: records are retired, nothing is erased.
    const applied = await call(w, 'POST', '/runtime/held-back/apply', { runtimeVersion: 'stranger-1' });
    expect(applied.json()).toEqual({ success: true, runtimeVersion: 'stranger-1' });
    expect((await encrypt(w, 'new')).statusCode).toBe(409);
    expect((await decrypt(w, sealed)).json()).toEqual({ success: true, data: 'alice@example.com', policyCode: 'P' });
    expect((await call(w, 'GET', '/runtime/info')).json()).toMatchObject({
      heldBackSnapshot: null,
      cache: { policyCount: 0, keyCount: 0 },
      retired: { policyCount: 1, keyCount: 2 },
    });

    // A restart loads the retired records from the store and still decrypts.
    const restarted = new CacheManager(new RuntimeCache(), new SnapshotStore(await sharedDb(), w.store.engineId, w.masterKey), silentLogger);
    await restarted.restore();
    const execution = new ExecutionService(restarted.cache, TEST_LIMITS);
    expect(execution.decryptOne({ data: sealed }).data).toBe('alice@example.com');
  });

  it('answers 404 when nothing is held back', async () => {
    w = await operationsWorld();
    const response = await call(w, 'POST', '/runtime/held-back/apply');
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ error: 'no hub snapshot is held back' });
  });
});

describe('registration hardening', () => {
  it('refuses any hub but the pinned one with 409', async () => {
    w = await operationsWorld({ registered: false, registration: { pinnedHubUrl: HUB_URL } });
    const stranger = await call(w, 'POST', '/runtime/identity', { hubUrl: 'http://stranger:9100', tenantId: 'evil' }, {});
    expect(stranger.statusCode).toBe(409);
    expect(stranger.json()).toEqual({ error: 'hubUrl is not the hub this engine is pinned to (SVC_HUB_URL)' });
    expect(w.agent.identity).toBeNull();
    expect((await call(w, 'POST', '/runtime/identity', { hubUrl: `${HUB_URL}/`, tenantId: TENANT }, {})).statusCode).toBe(200);
  });

  it('needs the registration token on the first registration, compared without logging it', async () => {
    const token = 'a-registration-token-0123456789';
    w = await operationsWorld({ registered: false, registration: { token } });
    const body = { hubUrl: HUB_URL, tenantId: TENANT };
    const missing = await call(w, 'POST', '/runtime/identity', body, {});
    expect(missing.statusCode).toBe(401);
    expect(missing.body).toBe('unauthorized');
    const wrong = await call(w, 'POST', '/runtime/identity', body, { 'x-svc-registration-token': 'guess' });
    expect(wrong.statusCode).toBe(401);
    expect(w.agent.identity).toBeNull();
    const right = await call(w, 'POST', '/runtime/identity', body, { 'x-svc-registration-token': token });
    expect(right.statusCode).toBe(200);
    expect(w.logs.join('')).not.toContain(token);
  });
});

describe('key states', () => {
  it('DISABLED refuses decryption and comes back when a sync lists the version again', async () => {
    w = await operationsWorld();
    const { v1 } = await loadRuntime(w);
    const sealed = (await encrypt(w, 'x')).json().data as string; // under version 2
    const { v2 } = { v2: w.manager.cache.current.keys.find((k) => k.version === 2)?.material as Uint8Array };
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 2, Buffer.from(v2), { status: 'DISABLED' }) });
    expect((await decrypt(w, sealed)).statusCode).toBe(404);
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 2, Buffer.from(v2)) });
    expect((await decrypt(w, sealed)).json().data).toBe('x');
    expect(v1.length).toBe(32);
  });

  it('destroys only a RETIRED or DISABLED version, only after the grace period, and keeps its name', async () => {
    w = await operationsWorld({ keyDestroyGraceMs: 3_600_000 });
    const { v1 } = await loadRuntime(w);
    const active = await call(w, 'POST', '/keys/destroy', { alias: 'ops-gcm', version: 2 });
    expect(active.statusCode).toBe(409);
    expect(active.json().error).toMatch(/is ACTIVE: only a RETIRED or DISABLED version may be destroyed/);
    await call(w, 'POST', '/cache/keys/sync-all', { keys: [keyRecord(w, 3, randomBytes(32))] });
    const early = await call(w, 'POST', '/keys/destroy', { alias: 'ops-gcm', version: 1 });
    expect(early.statusCode).toBe(409);
    expect(early.json().error).toMatch(/may be destroyed after the grace period/);
    expect((await call(w, 'POST', '/keys/destroy', { alias: 'ops-gcm', version: 9 })).statusCode).toBe(404);

    await w.close();
    const engineId = w.store.engineId;
    const masterKey = w.masterKey;
    w = undefined;
    // Same store, no grace period: now it may go.
    const manager = new CacheManager(new RuntimeCache(), new SnapshotStore(await sharedDb(), engineId, masterKey), silentLogger);
    await manager.restore();
    await manager.destroyKey('ops-gcm', 1, 0);
    const reloaded = await new SnapshotStore(await sharedDb(), engineId, masterKey).load();
    expect(reloaded.snapshot.keys.map((k) => k.version).sort()).toEqual([2, 3]);
    expect(reloaded.snapshot.destroyed?.map((d) => `${d.alias}@${d.version}`)).toEqual(['ops-gcm@1']);
    // A sync listing the destroyed version does not bring other material under its name.
    await manager.apply({ keys: { mode: 'upsert', records: [{ alias: 'ops-gcm', version: 1, algorithm: 'AES-256-GCM', status: 'ACTIVE', material: v1 }] } });
    expect(manager.cache.current.key('ops-gcm', 1)).toBeUndefined();
  });

  it('destroys a RETIRED version over HTTP once the grace period (0 here) is over: the documented answer, a warning, an audit event, and only its ciphertexts stop decrypting', async () => {
    const lines: string[] = [];
    const sink: AuditSink = { name: 'memory', write: (line) => void lines.push(line), writable: () => true, flush: async () => {}, close: async () => {} };
    const trail = new AuditTrail([sink], { failClosed: false, fingerprintKey: Buffer.alloc(32, 4) });
    w = await operationsWorld({ keyDestroyGraceMs: 0, audit: trail });
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 1, randomBytes(32)) });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('P') });
    const underV1 = (await encrypt(w, 'under version 1')).json().data as string;
    const v2 = keyRecord(w, 2, randomBytes(32));
    await call(w, 'POST', '/cache/keys/sync', { key: v2 });
    const underV2 = (await encrypt(w, 'under version 2')).json().data as string;
    // Version 1 is no longer listed: RETIRED, still decrypting.
    expect((await call(w, 'POST', '/cache/keys/sync-all', { keys: [v2] })).statusCode).toBe(200);
    expect((await decrypt(w, underV1)).json().data).toBe('under version 1');

    const destroyed = await call(w, 'POST', '/keys/destroy', { alias: 'ops-gcm', version: 1 });
    expect(destroyed.statusCode).toBe(200);
    expect(destroyed.json()).toEqual({ success: true, alias: 'ops-gcm', version: 1, status: 'DESTROYED' });
    expect(w.logs.map((l) => JSON.parse(l))).toContainEqual(
      expect.objectContaining({ level: 40, alias: 'ops-gcm', version: 1, msg: expect.stringMatching(/^key version DESTROYED/) }),
    );
    const events = lines.map((l) => JSON.parse(l) as AuditEvent);
    expect(events.filter((e) => e.operation === 'keys/destroy')).toMatchObject([
      { transport: 'operations', operation: 'keys/destroy', outcome: { result: 'ok', status: 200 } },
    ]);

    const gone = await decrypt(w, underV1);
    expect(gone.statusCode).toBe(404);
    expect(gone.json()).toEqual({ success: false, error: 'key not found: ops-gcm version 1' });
    expect((await decrypt(w, underV2)).json().data).toBe('under version 2');
    expect((await encrypt(w, 'after')).statusCode).toBe(200);
  });

  it('refuses decryption below the minimum decryption version (hub field and operator endpoint) and keeps the versions', async () => {
    w = await operationsWorld();
    const v1 = randomBytes(32);
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 1, v1) });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('P') });
    const old = (await encrypt(w, 'old')).json().data as string;
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 2, randomBytes(32), { minDecryptionVersion: 2 }) });
    const refused = await decrypt(w, old);
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toEqual({ success: false, error: 'key ops-gcm version 1 is below the minimum decryption version 2' });
    expect((await w.store.load()).snapshot.keys.map((k) => k.version).sort()).toEqual([1, 2]);
    // The operator lowers it again; the store kept version 1, so the old ciphertext decrypts.
    const lowered = await call(w, 'POST', '/keys/min-decryption-version', { alias: 'ops-gcm', minDecryptionVersion: 1 });
    expect(lowered.statusCode).toBe(200);
    expect((await decrypt(w, old)).json().data).toBe('old');
    // Never encrypt under a version below the minimum.
    await call(w, 'POST', '/keys/min-decryption-version', { alias: 'ops-gcm', minDecryptionVersion: 3 });
    expect((await encrypt(w, 'new')).statusCode).toBe(409);
  });

  it('refuses a runtime version that is not well-formed Unicode', async () => {
    w = await operationsWorld();
    const response = await call(w, 'POST', '/cache/policies/sync', { policy: policy('P'), runtimeVersion: 'v\ud800' });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ error: 'runtimeVersion must be well-formed Unicode (it contains a lone surrogate)' });
  });

  it('refuses a hub heartbeat answer whose runtime version holds a lone surrogate, keeping the current runtime', async () => {
    const answer = { runtimeVersion: 'hub-\ud800', keyMaterial: randomBytes(32) };
    // A hub answering every heartbeat with runtimeChanged and a snapshot that could be applied as it is.
    const hub: FetchLike = async () =>
      new Response(
        JSON.stringify({
          runtimeVersion: answer.runtimeVersion,
          runtimeChanged: true,
          snapshot: { policies: [policy('P'), policy('Q')], keys: [keyRecord(w as OperationsWorld, 1, answer.keyMaterial)] },
          serverTime: new Date().toISOString(),
        }),
        { status: 200, headers: { 'content-type': 'application/json' } },
      );
    w = await operationsWorld({ fetch: hub });
    await call(w, 'POST', '/cache/keys/sync', { key: keyRecord(w, 1, answer.keyMaterial) });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('P'), runtimeVersion: 'real-1' });

    const refused = await call(w, 'POST', '/runtime/heartbeat');
    expect(refused.statusCode).toBe(502);
    expect(refused.json().error).toBe('hub sent an invalid snapshot: runtimeVersion must be well-formed Unicode (it contains a lone surrogate)');
    const info = (await call(w, 'GET', '/runtime/info')).json();
    expect(info.lastApplyError).toBe('hub sent an invalid snapshot: runtimeVersion must be well-formed Unicode (it contains a lone surrogate)');
    expect((await call(w, 'GET', '/cache/status')).json()).toEqual({ policyCount: 1, keyCount: 1 });
    expect((await w.store.load()).snapshot.runtimeVersion).toBe('real-1');

    // The same snapshot under a well-formed version is applied: the version alone was refused.
    answer.runtimeVersion = 'hub-2';
    expect((await call(w, 'POST', '/runtime/heartbeat')).json()).toMatchObject({ applied: true, runtimeVersion: 'hub-2', policyCount: 2 });
  });
});

describe('store writes follow the change', () => {
  it('an incremental sync writes only the changed rows; the digest catches a truncated keys table', async () => {
    w = await operationsWorld();
    await loadRuntime(w);
    const writes: { policies: number; keys: number }[] = [];
    const save = w.store.saveChanges.bind(w.store);
    w.store.saveChanges = async (change, at, replace) => {
      writes.push({ policies: change.policies.length, keys: change.keys.length });
      return save(change, at, replace);
    };
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('Q') });
    await call(w, 'POST', '/cache/policies/sync', { policy: policy('Q') }); // unchanged: no row
    expect(writes).toEqual([
      { policies: 1, keys: 0 },
      { policies: 0, keys: 0 },
    ]);
    const db = (await sharedDb()).db;
    const { sql } = await import('drizzle-orm');
    await db.execute(sql`delete from svc_engine.keys where engine_id = ${w.store.engineId}`);
    await expect(w.store.load()).rejects.toThrow(
      /is damaged: it holds 0 key versions instead of 2 .*restore the store from a backup; or resync from the hub by resetting the runtime version/,
    );
  });
});
