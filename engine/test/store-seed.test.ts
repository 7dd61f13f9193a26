// Seeding the store without a hub: the bootstrap file's records are upserted (a restart never drops
// keys synced since), dev mode generates its demo policies once, and a plain dev key file left by
// earlier versions is imported wrapped and removed.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { generateDevBootstrap } from '../src/core/bootstrap.js';
import { ExecutionService } from '../src/core/execution-service.js';
import { RuntimeCache } from '../src/core/runtime-cache.js';
import { CacheManager } from '../src/store/cache-manager.js';
import { silentLogger } from '../src/store/logger.js';
import { seed } from '../src/store/seed.js';
import { SnapshotStore } from '../src/store/snapshot-store.js';
import { closeSharedDb, sharedDb } from './support/hub-fixtures.js';
import { TEST_LIMITS } from './support/http.js';

let dir: string;
const masterKey = randomBytes(32);

async function manager(engineId: string): Promise<CacheManager> {
  const m = new CacheManager(new RuntimeCache(), new SnapshotStore(await sharedDb(), engineId, masterKey), silentLogger);
  await m.restore();
  return m;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-seed-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

afterAll(closeSharedDb);

const bootstrap = (version: number) => ({
  runtimeVersion: `boot-${version}`,
  policies: [{ policyCode: 'BOOT', algorithm: 'AES-256-GCM', keyAlias: 'boot' }],
  keys: [{ alias: 'boot', version, algorithm: 'AES-256-GCM', material: randomBytes(32).toString('base64') }],
});

describe('seed', () => {
  it('upserts the bootstrap file into the store, keeping earlier keys on a later start', async () => {
    const id = `seed-${randomBytes(4).toString('hex')}`;
    const file = join(dir, 'bootstrap.json');
    await writeFile(file, JSON.stringify(bootstrap(1)));
    await seed(await manager(id), { bootstrapFile: file, devMode: false, dataDir: dir, masterKey }, silentLogger);
    await writeFile(file, JSON.stringify(bootstrap(2)));
    const restarted = await manager(id);
    expect(restarted.cache.current.keys.map((k) => k.version)).toEqual([1]);
    await seed(restarted, { bootstrapFile: file, devMode: false, dataDir: dir, masterKey }, silentLogger);
    const again = await manager(id);
    expect(again.cache.current.keys.map((k) => k.version).sort()).toEqual([1, 2]);
    expect(again.cache.current.runtimeVersion).toBe('boot-2');
  });

  it('names the file in the error when it cannot be read or parsed', async () => {
    const m = await manager(`seed-${randomBytes(4).toString('hex')}`);
    const missing = join(dir, 'missing.json');
    await expect(seed(m, { bootstrapFile: missing, devMode: false, dataDir: dir, masterKey }, silentLogger)).rejects.toThrow(
      `SVC_BOOTSTRAP_FILE: cannot read ${missing} (ENOENT)`,
    );
    const broken = join(dir, 'broken.json');
    await writeFile(broken, '{\n  "policies": [],\n  "keys": [],\n}\n');
    await expect(seed(m, { bootstrapFile: broken, devMode: false, dataDir: dir, masterKey }, silentLogger)).rejects.toThrow(
      `SVC_BOOTSTRAP_FILE: ${broken} is not valid JSON at line 4, column 1: expected double-quoted property name`,
    );
  });

  it('refuses a bootstrap file whose runtimeVersion holds a lone surrogate, and stores nothing of it', async () => {
    const id = `seed-${randomBytes(4).toString('hex')}`;
    const file = join(dir, 'bootstrap.json');
    // As an editor or a generator writes it: a JSON escape for half of a surrogate pair.
    await writeFile(file, JSON.stringify(bootstrap(1)).replace('"boot-1"', '"boot-\\ud800"'));
    await expect(seed(await manager(id), { bootstrapFile: file, devMode: false, dataDir: dir, masterKey }, silentLogger)).rejects.toThrow(
      'bootstrap: runtimeVersion must be well-formed Unicode (it contains a lone surrogate)',
    );
    const restarted = await manager(id);
    expect(restarted.cache.current.keys).toEqual([]);
    expect(restarted.cache.current.runtimeVersion).toBe('');
  });

  it('generates the dev demo policies once and keeps the same keys on later starts', async () => {
    const id = `seed-${randomBytes(4).toString('hex')}`;
    const first = await manager(id);
    await seed(first, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    expect(first.cache.current.policies.map((p) => p.policyCode).sort()).toEqual(['DEMO_DETERMINISTIC', 'DEMO_RANDOM']);
    const material = Buffer.from(first.cache.current.keys[0]?.material ?? []).toString('hex');
    const second = await manager(id);
    await seed(second, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    expect(Buffer.from(second.cache.current.keys[0]?.material ?? []).toString('hex')).toBe(material);
    // Only the record of the last demo key version generated stays beside the store (no key material).
    expect(await readdir(dir)).toEqual(['dev-key-versions.json']);
  });

  it('never generates demo keys again under a version that was used: not after a cache clear, not after a lost store', async () => {
    const id = `seed-${randomBytes(4).toString('hex')}`;
    const first = await manager(id);
    await seed(first, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    const execution = new ExecutionService(first.cache, TEST_LIMITS);
    const sealed = execution.encryptOne({ data: 'demo', policyCode: 'DEMO_RANDOM' }).data;
    const v1 = first.cache.current.policyByCode('DEMO_RANDOM') && first.cache.current.keys.find((k) => k.alias === 'demo-gcm')?.version;
    await first.clear();
    await seed(first, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    const versions = first.cache.current.keys.filter((k) => k.alias === 'demo-gcm').map((k) => `${k.version}:${k.status}`);
    expect(versions).toHaveLength(2);
    expect(versions).toContain(`${v1}:RETIRED`);
    expect(execution.decryptOne({ data: sealed }).data).toBe('demo');
    const v2 = first.cache.current.encryptContext(first.cache.current.policyByCode('DEMO_RANDOM')!);
    expect('key' in v2 && v2.key.version).toBeGreaterThan(v1 as number);
    // A lost store (another engine id, same data directory): still a version never used here.
    const lost = await manager(`seed-${randomBytes(4).toString('hex')}`);
    await seed(lost, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    const v3 = lost.cache.current.keys.find((k) => k.alias === 'demo-gcm')?.version as number;
    expect(v3).toBeGreaterThan('key' in v2 ? v2.key.version : 0);
    const other = new ExecutionService(lost.cache, TEST_LIMITS);
    expect(() => other.decryptOne({ data: sealed })).toThrow(/key not found: demo-gcm version/);
  });

  it('imports a plain dev key file left by earlier versions and removes it', async () => {
    const legacy = generateDevBootstrap();
    await writeFile(join(dir, 'dev-bootstrap.json'), JSON.stringify(legacy));
    const m = await manager(`seed-${randomBytes(4).toString('hex')}`);
    await seed(m, { devMode: true, dataDir: dir, masterKey }, silentLogger);
    const legacyKey = (legacy.keys as { alias: string; material: string }[]).find((k) => k.alias === 'demo-gcm');
    const imported = m.cache.current.key('demo-gcm', 1);
    expect(imported).toBeDefined();
    const stored = m.cache.current.keys.find((k) => k.alias === 'demo-gcm');
    expect(Buffer.from(stored?.material ?? []).toString('base64')).toBe(legacyKey?.material);
    expect(await readdir(dir)).toEqual([]);
  });
});
