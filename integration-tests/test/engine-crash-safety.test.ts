// The engine as a real process against crashes and damage: usage counts survive a SIGKILL (they are
// reserved ahead in the store), the data directory and the store's files are private to the engine's
// user, a damaged store (embedded, or PostgreSQL through DATABASE_URL) stops start-up with a message
// naming it and the way back, and the operations API is not on the execution listener unless chosen.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, expect, inject, it } from 'vitest';
import { engineClient } from '../src/engine-client.js';
import { type SupervisedEngine, superviseEngine } from '../src/engine-supervisor.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, withClient } from '../src/postgres-harness.js';
import { testBootstrap } from '../src/test-policies.js';

const TENANT = 'tenant-crash-safety';
const engines: (RunningEngine | SupervisedEngine)[] = [];

afterEach(async () => {
  for (const engine of engines.splice(0)) await engine.dispose();
});

const DAMAGED_DB = 'svc_engine_damaged_it';
afterAll(() => dropDatabase(inject('databaseUrl'), DAMAGED_DB));

async function register(opsUrl: string): Promise<void> {
  // No hub answers there: the engine stays OFFLINE, which is all the operations calls need.
  const response = await fetch(`${opsUrl}/engine/api/v1/runtime/identity`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ hubUrl: 'http://127.0.0.1:9', tenantId: TENANT }),
  });
  expect(response.status).toBe(200);
}

it('never under-counts encryptions after a SIGKILL', async () => {
  const bootstrapFile = join(await mkdtemp(join(tmpdir(), 'svc-crash-')), 'bootstrap.json');
  await writeFile(bootstrapFile, JSON.stringify(testBootstrap()), { mode: 0o600 });
  const engine = await superviseEngine({
    SVC_BOOTSTRAP_FILE: bootstrapFile,
    SVC_MASTER_KEY: randomBytes(32).toString('base64'),
    // Long enough that no periodic flush happens during the test: only reservations protect the counts.
    SVC_STORE_FLUSH_INTERVAL_MS: '3600000',
    SVC_HUB_HEARTBEAT_INTERVAL_MS: '3600000',
  });
  engines.push(engine);
  await register(engine.opsUrl);
  const items = Array.from({ length: 1000 }, (_, i) => ({ data: `value-${i}`, policyCode: 'PII_EMAIL' }));
  for (let round = 0; round < 3; round++) {
    const response = await fetch(`${engine.url}/api/encrypt/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ items }),
    });
    expect(response.status).toBe(200);
  }
  // Let the reservation write land (it is asynchronous), then crash.
  const client = engineClient(engine.url, TENANT, engine.opsUrl);
  const before = (await client.info()).keyUsage.find((k: { alias: string }) => k.alias === 'it-gcm');
  expect(before.encryptions).toBe(3000);
  await new Promise((r) => setTimeout(r, 500));
  await engine.kill('SIGKILL');
  await engine.start();
  const after = (await client.info()).keyUsage.find((k: { alias: string }) => k.alias === 'it-gcm');
  expect(after.encryptions).toBeGreaterThanOrEqual(3000);
  // Bounded over-count: at most one reservation block (10,000) per key version and restart.
  expect(after.encryptions).toBeLessThanOrEqual(3000 + 10_000);
});

it('keeps the data directory 0700 and the store files and dev master key 0600', async () => {
  const engine = await startEngine({ env: { SVC_LOG_LEVEL: 'warn' } }); // dev mode
  engines.push(engine);
  const mode = async (path: string) => (await stat(path)).mode & 0o777;
  expect(await mode(engine.dataDir)).toBe(0o700);
  expect(await mode(join(engine.dataDir, 'store'))).toBe(0o700);
  expect(await mode(join(engine.dataDir, 'dev-master.key'))).toBe(0o600);
  const files: string[] = [];
  const walk = async (dir: string) => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        expect(await mode(path), path).toBe(0o700);
        await walk(path);
      } else files.push(path);
    }
  };
  await walk(join(engine.dataDir, 'store'));
  expect(files.length).toBeGreaterThan(10);
  for (const file of files) expect(await mode(file), file).toBe(0o600);
});

it('stops with a message naming the damaged embedded store and the way back', async () => {
  const engine = await startEngine({ env: { SVC_LOG_LEVEL: 'warn' } });
  engines.push(engine);
  await engine.stop();
  const control = join(engine.dataDir, 'store', 'global', 'pg_control');
  await writeFile(control, Buffer.alloc(8192, 0x5a));
  const failure = await engine.restart().then(
    () => undefined,
    (error: Error) => error.message,
  );
  expect(failure).toContain(`the embedded store directory ${join(engine.dataDir, 'store')} is damaged`);
  expect(failure).toContain('restore that directory from a backup');
  expect(failure).not.toContain('Build with -sASSERTIONS');
});

it('stops with a message naming the damaged PostgreSQL store and the way back when its key rows are deleted', async () => {
  const adminUrl = inject('databaseUrl');
  const storeUrl = await createDatabase(adminUrl, DAMAGED_DB);
  const engine = await startEngine({ bootstrap: testBootstrap(), env: { DATABASE_URL: storeUrl } });
  engines.push(engine);
  await engine.stop();
  const deleted = await withClient(storeUrl, (c) => c.query("delete from svc_engine.keys where engine_id = 'default'"));
  expect(deleted.rowCount).toBeGreaterThan(0);
  const failure = await engine.restart().then(
    () => undefined,
    (error: Error) => error.message,
  );
  expect(failure).toMatch(/the snapshot store at postgres\S+\/svc_engine_damaged_it \(engine id default\) is damaged: it holds 0 key versions instead of [1-9]/);
  expect(failure).toContain('Refusing to start rather than serve a partial runtime');
  expect(failure).toContain('See docs/operations.md#damaged-store.');
});

it('serves the operations API on its own loopback listener, not on the execution one', async () => {
  const engine = await startEngine({ bootstrap: testBootstrap() });
  engines.push(engine);
  const onExecution = await fetch(`${engine.url}/engine/api/v1/runtime/identity`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ hubUrl: 'http://127.0.0.1:9', tenantId: TENANT }),
  });
  expect(onExecution.status).toBe(404);
  expect((await fetch(`${engine.opsUrl}/health`)).status).toBe(200);
  await register(engine.opsUrl);
});
