// The engine's side of the hub: heartbeats against the reference hub (through inject), applying the
// hub's snapshot, key rotation, hub and store outages, sync check and registration rules.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { parseEnvelope } from '../src/core/ciphertext-envelope.js';
import { EngineError } from '../src/core/errors.js';
import { ExecutionService } from '../src/core/execution-service.js';
import { type FetchLike, HubClient } from '../src/hub/hub-client.js';
import { parseIdentity, RuntimeAgent } from '../src/hub/runtime-agent.js';
import type { Logger } from '../src/store/logger.js';
import { closeSharedDb, HUB_URL, type HubWorld, hubWorld, injectFetch, TENANT } from './support/hub-fixtures.js';

const limits = { maxBatchItems: 100, maxDataBytes: 1 << 20 };
let world: HubWorld | undefined;

afterEach(async () => {
  await world?.close();
  world = undefined;
});

afterAll(closeSharedDb);

async function failure(promise: Promise<unknown>): Promise<EngineError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(EngineError);
  return error as EngineError;
}

describe('heartbeat', () => {
  it('applies the hub snapshot on the first heartbeat, turns ONLINE and can then encrypt', async () => {
    world = await hubWorld();
    expect(world.agent.status).toBe('OFFLINE');
    const outcome = await world.agent.heartbeat();
    expect(outcome).toMatchObject({ runtimeChanged: true, applied: true, policyCount: 1, keyCount: 1 });
    expect(world.agent.status).toBe('ONLINE');
    expect(world.manager.cache.current.runtimeVersion).toBe(
      world.hubState.runtimeVersion(world.hubState.tenant(TENANT)),
    );
    const execution = new ExecutionService(world.manager.cache, limits);
    const encrypted = execution.encryptOne({ data: 'alice@example.com', policyCode: 'PII_EMAIL' });
    expect(execution.decryptOne({ data: encrypted.data }).data).toBe('alice@example.com');
  });

  it('applies nothing when the runtime version has not changed', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const before = world.manager.cache.current;
    const outcome = await world.agent.heartbeat();
    expect(outcome).toMatchObject({ runtimeChanged: false, applied: false });
    expect(world.manager.cache.current).toBe(before);
  });

  it('persists the applied snapshot, so a restarted engine serves it without the hub', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const reloaded = await world.store.load();
    expect(reloaded.snapshot.policies.map((p) => p.policyCode)).toEqual(['PII_EMAIL']);
    expect(reloaded.snapshot.runtimeVersion).toBe(world.manager.cache.current.runtimeVersion);
  });

  it('brings a key rotation at the hub to the engine: new ciphertexts use the new version, old ones decrypt', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const execution = new ExecutionService(world.manager.cache, limits);
    const before = execution.encryptOne({ data: 'before', policyCode: 'PII_EMAIL' }).data;
    world.hubState.rotateKey(TENANT, 'pii-gcm');
    expect((await world.agent.heartbeat()).applied).toBe(true);
    const after = execution.encryptOne({ data: 'after', policyCode: 'PII_EMAIL' }).data;
    expect(parseEnvelope(before).keyVersion).toBe(1);
    expect(parseEnvelope(after).keyVersion).toBe(2);
    expect(execution.decryptOne({ data: before }).data).toBe('before');
    expect(execution.decryptOne({ data: after }).data).toBe('after');
  });

  it('reports usage counters to the hub in its crypto metrics', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const execution = new ExecutionService(world.manager.cache, limits);
    for (let i = 0; i < 3; i++) execution.encryptOne({ data: `v${i}`, policyCode: 'PII_EMAIL' });
    await world.agent.heartbeat();
    const seen = world.hubState.tenant(TENANT).lastHeartbeat;
    expect(seen?.cryptoMetrics.keys).toEqual([
      { alias: 'pii-gcm', version: 1, algorithm: 'AES-256-GCM', encryptions: 3, decryptions: 0, nearLimit: false },
    ]);
    expect(seen?.cryptoMetrics.totalEncryptions).toBe(3);
  });

  it('fails with 502 and turns OFFLINE when the hub is down, keeping the cache serving', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    world.hubControl.down = true;
    const error = await failure(world.agent.heartbeat());
    expect(error.status).toBe(502);
    expect(error.body()).toEqual({ success: false, error: 'hub heartbeat failed: ECONNREFUSED' });
    expect(world.agent.status).toBe('OFFLINE');
    expect(world.manager.cache.current.configured).toBe(true);
    world.hubControl.down = false;
    await world.agent.heartbeat();
    expect(world.agent.status).toBe('ONLINE');
  });

  it("keeps the hub's error body out of the 502 answer, lastHeartbeatError and the log", async () => {
    world = await hubWorld();
    const logged: string[] = [];
    const record = (fields: Record<string, unknown>, message: string) => logged.push(JSON.stringify({ fields, message }));
    const log: Logger = { debug: record, info: record, warn: record, error: record };
    const agent = new RuntimeAgent({
      ...world.agent.deps,
      log,
      client: new HubClient({
        timeoutMs: 2000,
        fetch: async () => new Response('{"error":"db password=hunter2"}', { status: 500 }),
      }),
    });
    const error = await failure(agent.heartbeat());
    expect(error.status).toBe(502);
    expect(error.body()).toEqual({ success: false, error: 'hub heartbeat failed: hub answered 500' });
    expect(agent.lastHeartbeatError).toBe('hub heartbeat failed: hub answered 500');
    expect(logged.length).toBeGreaterThan(0);
    expect(logged.join('\n')).not.toContain('hunter2');
    const check = await failure(agent.syncCheck());
    expect(check.body()).toEqual({ success: false, error: 'hub manifest failed: hub answered 500' });
  });

  it('refuses a snapshot whose keys are not wrapped under its master key, changing nothing', async () => {
    world = await hubWorld();
    world.hubState.tenant(TENANT).masterKey.fill(7);
    const error = await failure(world.agent.heartbeat());
    expect(error.status).toBe(502);
    expect(error.message).toBe(
      "hub sent an invalid snapshot: snapshot.keys[0]: wrappedMaterial does not unwrap under the engine's master key",
    );
    expect(world.manager.cache.current.configured).toBe(false);
  });

  it('keeps serving while the store is down, refuses the snapshot, and catches up once the store is back', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const execution = new ExecutionService(world.manager.cache, limits);
    const old = execution.encryptOne({ data: 'kept', policyCode: 'PII_EMAIL' }).data;
    world.store.failing = true;
    world.hubState.rotateKey(TENANT, 'pii-gcm');
    const error = await failure(world.agent.heartbeat());
    expect(error.status).toBe(503);
    expect(error.message).toMatch(/^snapshot store unavailable: sync not applied \(connect ECONNREFUSED/);
    expect(world.manager.health.available).toBe(false);
    expect(world.agent.status).toBe('ONLINE');
    expect(world.agent.lastApplyError).toMatch(/snapshot store unavailable/);
    // Memory does not run ahead of the store: still version 1 for new ciphertexts.
    expect(parseEnvelope(execution.encryptOne({ data: 'x', policyCode: 'PII_EMAIL' }).data).keyVersion).toBe(1);
    expect(execution.decryptOne({ data: old }).data).toBe('kept');

    world.store.failing = false;
    await world.manager.flushState();
    expect(world.manager.health).toEqual({ driver: 'pglite', available: true, lastError: null });
    expect((await world.agent.heartbeat()).applied).toBe(true);
    expect(parseEnvelope(execution.encryptOne({ data: 'y', policyCode: 'PII_EMAIL' }).data).keyVersion).toBe(2);
    const persisted = await world.store.load();
    expect(persisted.snapshot.keys.map((k) => k.version).sort()).toEqual([1, 2]);
  });
});

describe('sync check', () => {
  it('reports in sync after a heartbeat and names what the hub has that the engine lacks', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const check = await world.agent.syncCheck();
    expect(check.inSync).toBe(true);
    expect(check.local).toEqual(check.hub);
    world.hubState.putPolicy(TENANT, { policyCode: 'PII_PHONE', algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' });
    world.hubState.rotateKey(TENANT, 'pii-gcm');
    const stale = await world.agent.syncCheck();
    expect(stale.inSync).toBe(false);
    expect(stale.policies).toEqual({ missing: ['PII_PHONE'], unexpected: [], different: [] });
    // Version 1 became DECRYPT_ONLY at the hub: the engine's copy differs.
    expect(stale.keys).toEqual({ missing: ['pii-gcm@2'], unexpected: [], different: ['pii-gcm@1'] });
  });

  it('detects key material that differs from the hub through check values', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    world.hubState.tenant(TENANT).keys.get('pii-gcm')?.[0]?.material.fill(1);
    const check = await world.agent.syncCheck();
    expect(check.keys.different).toEqual(['pii-gcm@1']);
  });

  /** The world's agent, but the hub's manifest passes through `edit` on its way to the engine. */
  type Records = Record<string, unknown>[];

  function agentWithManifest(w: HubWorld, edit: (manifest: { policies: Records; keys: Records }) => void): RuntimeAgent {
    const hubFetch = injectFetch(w.hub);
    const fetch: FetchLike = async (url, init) => {
      const response = await hubFetch(url, init);
      if (!url.endsWith('/manifest')) return response;
      const manifest = (await response.json()) as { policies: Records; keys: Records };
      edit(manifest);
      return new Response(JSON.stringify(manifest), { status: 200 });
    };
    return new RuntimeAgent({ ...w.agent.deps, client: new HubClient({ timeoutMs: 2000, fetch }) });
  }

  it('applies the record defaults to the manifest, so records leaving out optional fields are in sync', async () => {
    world = await hubWorld();
    world.hubState.putPolicy(TENANT, { policyCode: 'PII_MIN', algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' });
    await world.agent.heartbeat();
    const agent = agentWithManifest(world, (manifest) => {
      for (const policy of manifest.policies) {
        if (policy.policyCode !== 'PII_MIN') continue;
        // policyName defaults to policyCode, policyVersion to 1, status to ACTIVE.
        delete policy.policyName;
        delete policy.policyVersion;
        delete policy.status;
      }
      for (const key of manifest.keys) delete key.status;
      manifest.policies.find((p) => p.policyCode === 'PII_EMAIL')!.status = 'active';
    });
    const check = await agent.syncCheck();
    expect(check.policies).toEqual({ missing: [], unexpected: [], different: [] });
    expect(check.keys).toEqual({ missing: [], unexpected: [], different: [] });
    expect(check.inSync).toBe(true);
  });

  it('answers 502 when the manifest holds a record the engine would refuse', async () => {
    world = await hubWorld();
    await world.agent.heartbeat();
    const agent = agentWithManifest(world, (manifest) => {
      const first = manifest.policies[0];
      if (first) first.algorithm = 'ROT13';
    });
    const error = await failure(agent.syncCheck());
    expect(error.status).toBe(502);
    expect(error.message).toBe(
      'hub sent an invalid manifest: manifest.policies[0]: algorithm must be one of AES-256-GCM, AES-256-SIV',
    );
  });

  it('answers 502 when the hub cannot be asked', async () => {
    world = await hubWorld();
    world.hubControl.down = true;
    expect((await failure(world.agent.syncCheck())).status).toBe(502);
  });
});

describe('registration', () => {
  it('rejects an invalid hub URL or an empty tenant with 400', () => {
    for (const body of [
      { hubUrl: 'not a url', tenantId: 't' },
      { hubUrl: 'ftp://hub:21', tenantId: 't' },
      { hubUrl: 'http://user:pw@hub:1', tenantId: 't' },
      { hubUrl: 'http://hub:1', tenantId: '' },
      { hubUrl: 'http://hub:1', tenantId: 'with space' },
      { hubUrl: 'http://hub:1' },
      null,
    ]) {
      expect(() => parseIdentity(body)).toThrow(EngineError);
    }
    expect(parseIdentity({ hubUrl: 'http://hub:1/', tenantId: 't' })).toEqual({
      hubUrl: 'http://hub:1',
      tenantId: 't',
    });
  });

  it('registers once, accepts the same identity again, and refuses another hub URL with 409', async () => {
    world = await hubWorld({ registered: false });
    expect(world.agent.status).toBe('UNREGISTERED');
    await world.agent.register({ hubUrl: HUB_URL, tenantId: TENANT }, undefined);
    expect(world.agent.status).toBe('OFFLINE');
    await world.agent.register({ hubUrl: `${HUB_URL}/`, tenantId: TENANT }, undefined);
    const conflict = await failure(world.agent.register({ hubUrl: 'http://elsewhere:1', tenantId: TENANT }, TENANT));
    expect(conflict.status).toBe(409);
    expect(conflict.body()).toEqual({ error: 'runtime identity hubUrl cannot be changed through registration' });
    expect((await world.store.load()).identity).toEqual({ hubUrl: HUB_URL, tenantId: TENANT });
  });

  it('changes the tenant only for a caller presenting the current tenant', async () => {
    world = await hubWorld();
    const stranger = await failure(world.agent.register({ hubUrl: HUB_URL, tenantId: 'tenant-evil' }, undefined));
    expect(stranger.status).toBe(401);
    const wrong = await failure(world.agent.register({ hubUrl: HUB_URL, tenantId: 'tenant-evil' }, 'guess'));
    expect(wrong.status).toBe(401);
    await world.agent.register({ hubUrl: HUB_URL, tenantId: 'tenant-2' }, TENANT);
    expect(world.agent.identity).toEqual({ hubUrl: HUB_URL, tenantId: 'tenant-2' });
    expect((await world.store.load()).identity?.tenantId).toBe('tenant-2');
  });

  it('fails registration with 503 when the store cannot persist it, keeping the engine unregistered', async () => {
    world = await hubWorld({ registered: false });
    world.store.failing = true;
    const error = await failure(world.agent.register({ hubUrl: HUB_URL, tenantId: TENANT }, undefined));
    expect(error.status).toBe(503);
    expect(world.agent.status).toBe('UNREGISTERED');
  });
});
