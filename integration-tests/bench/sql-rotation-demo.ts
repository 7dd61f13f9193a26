// `npm run demo:sql-rotation`: a key rotation of a whole column, done from SQL, with real processes.
// A throwaway PostgreSQL, the reference hub and the engine (HTTP and its wire endpoint) start; a table of
// SVC_DEMO_ROWS rows (default 100000) is encrypted under key version 1 in every bridge that runs here
// (PL/Python, dblink); the hub rotates the key; svc_rewrap_column moves each column to version 2 (its
// notices and rows/s printed), a second run shows the skip, svc_key_versions counts before and after,
// version 1 is then made to refuse decryption, and the audit events the rewrap produced are printed.
// A demonstration that prints what it did; it asserts nothing (the tests do: sql-rotation.test.ts).
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type pg from 'pg';
import { engineClient } from '../src/engine-client.js';
import { superviseEngine } from '../src/engine-supervisor.js';
import { startHub } from '../src/hub-process.js';
import { createDatabase, freePort, startPostgres, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setDblinkServer, setEngineServer } from '../src/sql-install.js';

const ROWS = Number(process.env.SVC_DEMO_ROWS ?? 100_000);
const TENANT = 'tenant-rotation-demo';
const ENGINE_PASSWORD = randomBytes(16).toString('hex');
const BRIDGES = ['plpython3u', 'dblink'] as const;

function show(sql: string): void {
  console.log(`\n${sql.replace(/\s+/g, ' ').trim()}`);
}

async function run(c: pg.Client, sql: string): Promise<pg.QueryResult> {
  show(sql);
  const notices = (n: { message?: string }) => console.log(`  NOTICE: ${n.message}`);
  c.on('notice', notices);
  const started = process.hrtime.bigint();
  try {
    return await c.query(sql);
  } finally {
    c.off('notice', notices);
    console.log(`  (${(Number(process.hrtime.bigint() - started) / 1e9).toFixed(2)} s)`);
  }
}

async function table(c: pg.Client, sql: string): Promise<void> {
  const { rows } = await run(c, sql);
  for (const row of rows) console.log(`  ${Object.values(row).map((v) => (v === null ? '(null)' : String(v))).join(' | ')}`);
}

async function main(): Promise<void> {
  const postgres = await startPostgres();
  const hub = await startHub();
  const masterKey = randomBytes(32).toString('base64');
  const pgPort = await freePort();
  await hub.admin('PUT', `/tenants/${TENANT}`, { masterKey });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-email', algorithm: 'AES-256-GCM' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_EMAIL`, { algorithm: 'AES-256-GCM', keyAlias: 'pii-email' });
  const engine = await superviseEngine({
    SVC_MASTER_KEY: masterKey,
    SVC_PG_PORT: String(pgPort),
    SVC_PG_USER: 'svc',
    SVC_PG_PASSWORD: ENGINE_PASSWORD,
  });
  try {
    const ops = engineClient(engine.url, TENANT, engine.opsUrl);
    await hub.admin('POST', `/tenants/${TENANT}/register`, { engineUrl: engine.opsUrl });
    await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'full' });
    console.log(`key rotation of a ${ROWS}-row column from SQL; engine ${engine.url} (wire endpoint on port ${pgPort}), PostgreSQL ${postgres.source}`);

    const urls: Record<string, string> = {};
    for (const bridge of BRIDGES) {
      const url = await createDatabase(postgres.adminUrl, `svc_demo_${bridge}`);
      urls[bridge] = url;
      await applyMigrations(url, { 'svc.bridge': bridge });
      if (bridge === 'dblink') await setDblinkServer(url, { port: pgPort, password: ENGINE_PASSWORD });
      else await setEngineServer(url, { url: engine.url });
      await withClient(url, async (c) => {
        console.log(`\n=== ${bridge} bridge: the column under key version 1`);
        await run(c, `CREATE TABLE customers AS SELECT g AS id, 'user' || g || '@example.com' AS email FROM generate_series(1, ${ROWS}) g;
          ALTER TABLE customers ADD PRIMARY KEY (id)`);
        await run(c, 'CALL svc_encrypt_column(\'customers\', \'email\', \'PII_EMAIL\', 10000)');
      });
    }

    console.log('\n=== the hub rotates the key and pushes the new version');
    console.log(JSON.stringify(await hub.admin('POST', `/tenants/${TENANT}/keys/pii-email/rotate`)));
    await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'incremental' });

    // One version-1 ciphertext kept aside, as a backup taken before the rewrap would hold it.
    const versionOne = await withClient(urls.plpython3u as string, async (c) => (await c.query('SELECT email FROM customers WHERE id = 1')).rows[0].email as string);
    const auditFrom = (await readFile(join(engine.dataDir, 'audit.log'), 'utf8').catch(() => '')).length;
    for (const bridge of BRIDGES) {
      await withClient(urls[bridge] as string, async (c) => {
        console.log(`\n=== ${bridge} bridge: rewrap the column`);
        await table(c, 'SELECT * FROM svc_key_versions(\'customers\', \'email\')');
        const started = process.hrtime.bigint();
        await run(c, 'CALL svc_rewrap_column(\'customers\', \'email\', 10000)');
        const seconds = Number(process.hrtime.bigint() - started) / 1e9;
        console.log(`  => ${Math.round(ROWS / seconds)} rows/s rewrapped (${ROWS} rows in ${seconds.toFixed(2)} s)`);
        await run(c, 'CALL svc_rewrap_column(\'customers\', \'email\', 10000)');
        await table(c, 'SELECT * FROM svc_key_versions(\'customers\', \'email\')');
      });
    }

    console.log('\n=== version 1 may no longer decrypt (POST /engine/api/v1/keys/min-decryption-version)');
    const retired = await ops.ops('POST', '/keys/min-decryption-version', { alias: 'pii-email', minDecryptionVersion: 2 });
    console.log(`  ${retired.status} ${JSON.stringify(retired.body)}`);
    await withClient(urls.plpython3u as string, async (c) => {
      await table(c, `SELECT count(*) AS readable FROM unnest((SELECT svc_decrypt(array_agg(email)) FROM customers)) AS p
                       WHERE p LIKE 'user%@example.com'`);
      const refused = await c.query('SELECT svc_decrypt($1)', [versionOne]).then(() => 'decrypted', (e: Error) => e.message);
      console.log(`\nSELECT svc_decrypt(<a version-1 ciphertext kept from before the rewrap>)\n  ERROR: ${refused}`);
    });

    await new Promise((resolve) => setTimeout(resolve, 1500));
    const lines = (await readFile(join(engine.dataDir, 'audit.log'), 'utf8')).slice(auditFrom).split('\n').filter((l) => l !== '');
    const rewraps = lines.filter((l) => JSON.parse(l).operation === 'rewrap');
    console.log(`\n=== audit: ${lines.length} events since the rotation, ${rewraps.length} of them rewrap (one per chunk, never one per value)`);
    for (const line of rewraps.slice(0, 3)) console.log(`  ${line}`);
    if (rewraps.length > 3) console.log(`  ... and ${rewraps.length - 3} more`);
  } finally {
    await engine.dispose();
    await hub.dispose();
    await postgres.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
