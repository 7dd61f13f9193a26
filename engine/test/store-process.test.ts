// The embedded store in its own process: calls reach the same SnapshotStore, the process ends when
// idle and comes back with the data, and a store process that dies is replaced by the next call.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { KeyRecord, PolicyRecord } from '../src/core/records.js';
import { RuntimeCache } from '../src/core/runtime-cache.js';
import { CacheManager } from '../src/store/cache-manager.js';
import { silentLogger } from '../src/store/logger.js';
import { forkStoreProcess, ProcessSnapshotStore } from '../src/store/process-snapshot-store.js';

const policy: PolicyRecord = {
  policyCode: 'P1',
  policyName: 'p1',
  policyVersion: 1,
  algorithm: 'AES-256-GCM',
  keyAlias: 'k1',
  status: 'ACTIVE',
};
const key: KeyRecord = { alias: 'k1', version: 1, algorithm: 'AES-256-GCM', status: 'ACTIVE', material: randomBytes(32) };

let root: string;
const masterKey = randomBytes(32);
const stores: ProcessSnapshotStore[] = [];

function processStore(idleCloseMs: number, preforked?: ReturnType<typeof forkStoreProcess>): ProcessSnapshotStore {
  const store = new ProcessSnapshotStore(
    { pgliteDir: join(root, 'store'), engineId: 'default', masterKey, logLevel: 'silent' },
    idleCloseMs,
    preforked,
  );
  stores.push(store);
  return store;
}

async function waitFor(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(condition()).toBe(true);
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-store-process-'));
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
  await rm(root, { recursive: true, force: true });
});

it('persists a sync through the store process, ends it when idle, and loads the same snapshot from a new one', async () => {
  const store = processStore(200);
  const manager = new CacheManager(new RuntimeCache(), store, silentLogger);
  await manager.restore();
  await manager.apply({ policies: { mode: 'upsert', records: [policy] }, keys: { mode: 'upsert', records: [key] }, runtimeVersion: 'v1' });
  expect(store.pid).toBeTypeOf('number');
  await waitFor(() => store.pid === undefined);

  const again = new CacheManager(new RuntimeCache(), processStore(200), silentLogger);
  await again.restore();
  expect(again.cache.current.runtimeVersion).toBe('v1');
  expect(again.cache.current.policyByCode('P1')?.keyAlias).toBe('k1');
  expect(Buffer.from(again.cache.current.keys[0]!.material).equals(key.material)).toBe(true);
});

it('replaces a store process that died: the next call forks a new one and finds the data', async () => {
  const store = processStore(60_000);
  await store.saveIdentity({ hubUrl: 'http://hub:1', tenantId: 't' });
  const pid = store.pid!;
  process.kill(pid, 'SIGKILL');
  await waitFor(() => store.pid === undefined);
  await store.saveIdentity({ hubUrl: 'http://hub:2', tenantId: 't' });
  expect(store.pid).not.toBe(pid);
  expect((await store.load()).identity).toEqual({ hubUrl: 'http://hub:2', tenantId: 't' });
});

it('an idle engine leaves the store process ended: the periodic flush writes only what changed', async () => {
  const store = processStore(100);
  const manager = new CacheManager(new RuntimeCache(), store, silentLogger);
  await manager.restore();
  await manager.apply({ policies: { mode: 'upsert', records: [policy] }, keys: { mode: 'upsert', records: [key] }, runtimeVersion: 'v1' });
  const heartbeat = Date.now();
  manager.noteHeartbeat(new Date(heartbeat));
  await manager.flushState();
  await waitFor(() => store.pid === undefined);

  // Nothing changed but the heartbeat time, a minute on: not worth waking the store for.
  manager.noteHeartbeat(new Date(heartbeat + 60_000));
  await manager.flushState();
  expect(store.pid).toBeUndefined();

  // A counter changed: written.
  manager.cache.counters.cell('k1', 1).decryptions += 1;
  await manager.flushState();
  expect(store.pid).toBeTypeOf('number');
  await waitFor(() => store.pid === undefined);
  const stored = await processStore(100).load();
  expect(stored.usage.find((u) => u.alias === 'k1')?.decryptions).toBe(1);
});

it('never opens one directory twice: a second store process waits until the first has ended', async () => {
  const first = processStore(60_000);
  await first.saveIdentity({ hubUrl: 'http://hub:1', tenantId: 't' });
  const second = processStore(60_000);
  let loaded = false;
  const load = second.load().then((state) => ((loaded = true), state));
  await new Promise((resolve) => setTimeout(resolve, 1500));
  expect(loaded).toBe(false);
  await first.close();
  expect((await load).identity).toEqual({ hubUrl: 'http://hub:1', tenantId: 't' });
});

it('a store process forked ahead touches the directory only once it is sent the open', async () => {
  // One that is never handed over (the engine failed to start) ends with its channel, leaving nothing.
  const unused = forkStoreProcess(join(root, 'store'));
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const ended = new Promise((resolve) => unused.once('exit', resolve));
  unused.disconnect();
  await ended;
  expect(existsSync(join(root, 'store'))).toBe(false);
  expect(existsSync(join(root, 'store.lock'))).toBe(false);

  // One that is handed over serves the first call.
  const preforked = forkStoreProcess(join(root, 'store'));
  const store = processStore(60_000, preforked);
  await store.saveIdentity({ hubUrl: 'http://hub:1', tenantId: 't' });
  expect(store.pid).toBe(preforked.pid);
  expect((await store.load()).identity).toEqual({ hubUrl: 'http://hub:1', tenantId: 't' });
});

it('a store process forked ahead that ended before it was handed over is replaced by the first call', async () => {
  const preforked = forkStoreProcess(join(root, 'store'));
  const ended = new Promise((resolve) => preforked.once('exit', resolve));
  preforked.kill('SIGKILL');
  await ended;
  const store = processStore(60_000, preforked);
  expect(store.pid).toBeUndefined();
  await store.saveIdentity({ hubUrl: 'http://hub:1', tenantId: 't' });
  expect(store.pid).toBeTypeOf('number');
  expect(store.pid).not.toBe(preforked.pid);
});
