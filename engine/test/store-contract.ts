// The snapshot store's behaviour, written once and run against both drivers: in-memory PGlite in
// the engine's unit tests (store-pglite.test.ts) and a real PostgreSQL in integration-tests/.
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { KeyRecord, PolicyRecord } from '../src/core/records.js';
import { RuntimeCache } from '../src/core/runtime-cache.js';
import { CacheManager } from '../src/store/cache-manager.js';
import { silentLogger } from '../src/store/logger.js';
import { MasterKeyError } from '../src/store/master-key.js';
import type { OpenedDb } from '../src/store/open-store.js';
import { SnapshotStore } from '../src/store/snapshot-store.js';

export interface StoreContractTarget {
  /** Opens the database with migrations applied; called once per suite, closed after it. */
  open(): Promise<OpenedDb>;
}

const gcmPolicy = (code: string, alias = 'k-gcm'): PolicyRecord => ({
  policyCode: code,
  policyName: code.toLowerCase(),
  policyVersion: 1,
  algorithm: 'AES-256-GCM',
  keyAlias: alias,
  status: 'ACTIVE',
});

const gcmKey = (alias: string, version: number): KeyRecord => ({
  alias,
  version,
  algorithm: 'AES-256-GCM',
  status: 'ACTIVE',
  material: randomBytes(32),
});

/** Every row of the engine's tables as text, the way a dump of the database would show it. */
export async function dumpTables(opened: OpenedDb): Promise<string> {
  const tables = ['runtime_identity', 'runtime_state', 'policies', 'keys', 'key_usage'];
  let out = '';
  for (const table of tables) {
    const result = await opened.db.execute(sql.raw(`select t::text as row from svc_engine.${table} t`));
    const rows = (result as unknown as { rows: { row: string }[] }).rows;
    out += rows.map((r) => r.row).join('\n');
  }
  return out;
}

export function describeStoreContract(driverName: string, target: StoreContractTarget): void {
  describe(`snapshot store on ${driverName}`, () => {
    let opened: OpenedDb;
    let engineId: string;
    const masterKey = randomBytes(32);

    beforeAll(async () => {
      opened = await target.open();
    });

    afterAll(async () => {
      await opened.close();
    });

    beforeEach(() => {
      // A fresh engine id per test isolates tests sharing one database, as engines sharing a store are.
      engineId = `engine-${randomBytes(6).toString('hex')}`;
    });

    it('loads an empty runtime from a new store', async () => {
      const stored = await new SnapshotStore(opened, engineId, masterKey).load();
      expect(stored.identity).toBeNull();
      expect(stored.snapshot).toEqual({
        policies: [],
        keys: [],
        runtimeVersion: '',
        destroyed: [],
        minDecryptionVersions: new Map(),
      });
      expect(stored.lastSyncAt).toBeNull();
    });

    it('saves a snapshot and loads the same policies, keys and runtime version back', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      const keys = [
        gcmKey('k-gcm', 1),
        gcmKey('k-gcm', 2),
        { ...gcmKey('k-big', 0xffff_ffff), status: 'DECRYPT_ONLY' as const },
      ];
      const policies = [gcmPolicy('P_ONE'), { ...gcmPolicy('P_TWO'), policyVersion: 7, status: 'DISABLED' as const }];
      await store.saveSnapshot({ policies, keys, runtimeVersion: 'rv-42' }, new Date());
      const stored = await new SnapshotStore(opened, engineId, masterKey).load();
      expect(stored.snapshot.runtimeVersion).toBe('rv-42');
      expect([...stored.snapshot.policies].sort((a, b) => a.policyCode.localeCompare(b.policyCode))).toEqual(policies);
      const byId = (k: KeyRecord) => `${k.alias}/${k.version}`;
      const loaded = [...stored.snapshot.keys].sort((a, b) => byId(a).localeCompare(byId(b)));
      const saved = [...keys].sort((a, b) => byId(a).localeCompare(byId(b)));
      expect(loaded.map(({ statusSince: _since, ...k }) => ({ ...k, material: Buffer.from(k.material).toString('hex') }))).toEqual(
        saved.map((k) => ({ ...k, material: Buffer.from(k.material).toString('hex') })),
      );
      expect(stored.lastSyncAt).toBeInstanceOf(Date);
    });

    it('replaces the whole snapshot on save, so removed records are gone after a reload', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      await store.saveSnapshot(
        { policies: [gcmPolicy('A'), gcmPolicy('B')], keys: [gcmKey('k-gcm', 1)], runtimeVersion: '1' },
        new Date(),
      );
      await store.saveSnapshot({ policies: [gcmPolicy('B')], keys: [], runtimeVersion: '2' }, new Date());
      const stored = await store.load();
      expect(stored.snapshot.policies.map((p) => p.policyCode)).toEqual(['B']);
      expect(stored.snapshot.keys).toEqual([]);
    });

    it('never stores key material in plaintext: no table holds the raw bytes, their hex or their base64', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      const keys = [
        gcmKey('k-gcm', 1),
        { ...gcmKey('k-siv', 1), algorithm: 'AES-256-SIV' as const, material: randomBytes(64) },
      ];
      await store.saveSnapshot({ policies: [gcmPolicy('P')], keys, runtimeVersion: 'x' }, new Date());
      await store.saveIdentity({ hubUrl: 'http://hub.example:9100', tenantId: 'tenant-a' });
      const dump = await dumpTables(opened);
      expect(dump).toContain('k-siv');
      for (const key of keys) {
        const material = Buffer.from(key.material);
        expect(dump).not.toContain(material.toString('hex'));
        expect(dump).not.toContain(material.toString('base64'));
        expect(dump).not.toContain(material.toString('latin1'));
      }
    });

    it('refuses to load a store written under another master key', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      await store.saveSnapshot({ policies: [], keys: [gcmKey('k-gcm', 1)], runtimeVersion: '1' }, new Date());
      await expect(new SnapshotStore(opened, engineId, randomBytes(32)).load()).rejects.toThrow(MasterKeyError);
    });

    it('persists the runtime identity and its later update', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      await store.saveIdentity({ hubUrl: 'http://hub.example:9100', tenantId: 'tenant-a' });
      await store.saveIdentity({ hubUrl: 'http://hub.example:9100', tenantId: 'tenant-b' });
      expect((await store.load()).identity).toEqual({ hubUrl: 'http://hub.example:9100', tenantId: 'tenant-b' });
    });

    it('keeps engines sharing one store apart', async () => {
      const mine = new SnapshotStore(opened, engineId, masterKey);
      const theirs = new SnapshotStore(opened, `${engineId}-other`, masterKey);
      await mine.load();
      await theirs.load();
      await mine.saveSnapshot({ policies: [gcmPolicy('MINE')], keys: [], runtimeVersion: 'm' }, new Date());
      await theirs.saveIdentity({ hubUrl: 'http://other:1', tenantId: 't' });
      const loaded = await mine.load();
      expect(loaded.snapshot.policies.map((p) => p.policyCode)).toEqual(['MINE']);
      expect(loaded.identity).toBeNull();
      expect((await theirs.load()).snapshot.policies).toEqual([]);
    });

    it('persists usage counters and never moves them backwards', async () => {
      const store = new SnapshotStore(opened, engineId, masterKey);
      await store.load();
      const at = new Date('2030-01-02T03:04:05Z');
      await store.saveState({
        lastHeartbeatAt: at,
        usage: [{ alias: 'k', version: 1, encryptions: 5_000_000_000, decryptions: 3 }],
      });
      await store.saveState({
        lastHeartbeatAt: null,
        usage: [{ alias: 'k', version: 1, encryptions: 10, decryptions: 4 }],
      });
      const loaded = await store.load();
      expect(loaded.usage.map(({ reserved: _r, ...u }) => u)).toEqual([{ alias: 'k', version: 1, encryptions: 5_000_000_000, decryptions: 4 }]);
      expect(loaded.lastHeartbeatAt?.toISOString()).toBe(at.toISOString());
    });

    it('restores a cache from the store: policies, keys and usage counters, before anything is served', async () => {
      const first = new CacheManager(new RuntimeCache(), new SnapshotStore(opened, engineId, masterKey), silentLogger);
      await first.restore();
      await first.apply({
        policies: { mode: 'upsert', records: [gcmPolicy('P')] },
        keys: { mode: 'upsert', records: [gcmKey('k-gcm', 1)] },
        runtimeVersion: 'r1',
      });
      first.cache.counters.cell('k-gcm', 1).encryptions = 41;
      await first.flushState();

      const second = new CacheManager(new RuntimeCache(), new SnapshotStore(opened, engineId, masterKey), silentLogger);
      await second.restore();
      expect(second.cache.current.configured).toBe(true);
      expect(second.cache.current.runtimeVersion).toBe('r1');
      // Restored from the persisted reservation mark: never below the real count, at most a block above.
      const restored = second.cache.counters.cell('k-gcm', 1).encryptions;
      expect(restored).toBeGreaterThanOrEqual(41);
      expect(restored).toBeLessThanOrEqual(41 + second.cache.counters.block);
    });
  });
}
