// Faults between the engine and its hub, with real processes: the reference hub and the engine
// (embedded PGlite store). Hub down at start, SIGKILL after a sync, key rotation through the heartbeat.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineClient, eventually, keyVersionOf } from '../src/engine-client.js';
import { type SupervisedEngine, superviseEngine } from '../src/engine-supervisor.js';
import { type RunningHub, startHub } from '../src/hub-process.js';

const TENANT = 'tenant-faults';
const MASTER_KEY = randomBytes(32).toString('base64');

let hub: RunningHub;
let engine: SupervisedEngine;
let client: ReturnType<typeof engineClient>;

async function hubRuntimeVersion(): Promise<string> {
  return (await hub.admin<{ runtimeVersion: string }>('GET', `/tenants/${TENANT}`)).runtimeVersion;
}

beforeAll(async () => {
  hub = await startHub();
  await hub.admin('PUT', `/tenants/${TENANT}`, { masterKey: MASTER_KEY });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-gcm', algorithm: 'AES-256-GCM' });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-siv', algorithm: 'AES-256-SIV' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_EMAIL`, { algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_SSN`, { algorithm: 'AES-256-SIV', keyAlias: 'pii-siv' });
  engine = await superviseEngine({
    SVC_MASTER_KEY: MASTER_KEY,
    SVC_HUB_HEARTBEAT_INTERVAL_MS: '200',
    SVC_HUB_BACKOFF_MAX_MS: '400',
    SVC_HUB_TIMEOUT_MS: '1000',
    SVC_STORE_FLUSH_INTERVAL_MS: '300',
  });
  client = engineClient(engine.url, TENANT, engine.opsUrl);
  await hub.admin('POST', `/tenants/${TENANT}/register`, { engineUrl: engine.opsUrl });
  await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'full' });
});

afterAll(async () => {
  await engine?.dispose();
  await hub?.dispose();
});

describe('engine and hub as real processes', () => {
  it('is registered and fed by the hub, and reports ONLINE once it heartbeats', async () => {
    expect((await client.ops('GET', '/cache/status')).body).toEqual({ policyCount: 2, keyCount: 2 });
    await eventually('the engine is ONLINE', async () => (await client.info()).status === 'ONLINE');
    const check = await client.ops('GET', '/cache/sync-check');
    expect(check.body.inSync).toBe(true);
    expect(await client.decrypt(await client.encrypt('a@example.com', 'PII_EMAIL'))).toBe('a@example.com');
  });

  it('starts OFFLINE from its persisted snapshot when the hub is down, serves, and turns ONLINE by itself', async () => {
    const before = await client.encrypt('before restart', 'PII_EMAIL');
    const deterministic = await client.encrypt('123-45-6789', 'PII_SSN');
    await engine.kill('SIGTERM');
    await hub.stop();
    await engine.start();
    expect((await client.info()).status).toBe('OFFLINE');
    expect(await client.decrypt(before)).toBe('before restart');
    expect(await client.encrypt('123-45-6789', 'PII_SSN')).toBe(deterministic);
    expect(await client.decrypt(await client.encrypt('while offline', 'PII_EMAIL'))).toBe('while offline');
    const heartbeat = await client.ops('POST', '/runtime/heartbeat');
    expect(heartbeat.status).toBe(502);
    expect(heartbeat.body).toEqual({ success: false, error: 'hub heartbeat failed: ECONNREFUSED' });

    await hub.start();
    await eventually('the engine turns ONLINE without a restart', async () => (await client.info()).status === 'ONLINE');
    expect(engine.output()).toContain('hub connection established: ONLINE');
  });

  it('keeps everything synced before a SIGKILL: a restart with the hub down still encrypts and decrypts', async () => {
    await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'card-gcm', algorithm: 'AES-256-GCM' });
    await hub.admin('PUT', `/tenants/${TENANT}/policies/CARD`, { algorithm: 'AES-256-GCM', keyAlias: 'card-gcm' });
    const pushed = await hub.admin<{ runtimeVersion: string }>('POST', `/tenants/${TENANT}/push`, {
      engineUrl: engine.opsUrl,
      mode: 'incremental',
    });
    expect((await client.info()).runtimeVersion).toBe(pushed.runtimeVersion);
    const card = await client.encrypt('4111 1111 1111 1111', 'CARD');
    const email = await client.encrypt('kill@example.com', 'PII_EMAIL');

    await engine.kill('SIGKILL');
    await hub.stop();
    await engine.start();
    const info = await client.info();
    expect(info.status).toBe('OFFLINE');
    expect(info.runtimeVersion).toBe(pushed.runtimeVersion);
    expect(info.cache).toEqual({ policyCount: 3, keyCount: 3 });
    expect(await client.decrypt(card)).toBe('4111 1111 1111 1111');
    expect(await client.decrypt(email)).toBe('kill@example.com');
    expect(await client.decrypt(await client.encrypt('after kill', 'CARD'))).toBe('after kill');
    await hub.start();
    await eventually('the engine is ONLINE again', async () => (await client.info()).status === 'ONLINE');
  });

  it('receives a key rotation at the hub through the heartbeat: new ciphertexts use the new version, old ones decrypt', async () => {
    const old = await client.encrypt('rotate me', 'PII_EMAIL');
    expect(keyVersionOf(old)).toBe(1);
    await hub.admin('POST', `/tenants/${TENANT}/keys/pii-gcm/rotate`);
    const target = await hubRuntimeVersion();
    await eventually('the heartbeat applied the rotation', async () => (await client.info()).runtimeVersion === target);
    const fresh = await client.encrypt('rotated', 'PII_EMAIL');
    expect(keyVersionOf(fresh)).toBe(2);
    expect(await client.decrypt(old)).toBe('rotate me');
    expect(await client.decrypt(fresh)).toBe('rotated');
    expect((await client.ops('GET', '/cache/sync-check')).body.inSync).toBe(true);
    // The hub saw the engine's usage in its heartbeats.
    await eventually('the hub saw usage of version 2', async () => {
      const state = await hub.admin<{ lastHeartbeat: { cryptoMetrics: { keys: { alias: string; version: number; encryptions: number }[] } } }>(
        'GET',
        `/tenants/${TENANT}`,
      );
      return state.lastHeartbeat.cryptoMetrics.keys.some((k) => k.alias === 'pii-gcm' && k.version === 2 && k.encryptions >= 1);
    });
  });
});
