// `npm run demo:sql-dblink`: what a DBA on a managed PostgreSQL does, with real processes. A throwaway
// PostgreSQL and the engine (its wire endpoint on) start; in a fresh database the DBA creates only the
// dblink extension, applies the migrations with svc.bridge = dblink, creates the foreign server and the
// user mapping, and grants svc_user to an ordinary application role. That role encrypts a
// SVC_DEMO_ROWS-row column (default 100000) in place with svc_encrypt_column and reads it back with
// svc_decrypt (the whole column as arrays, and a sample row by row). A demonstration that prints what it did, with rows/s; it asserts nothing (the tests do:
// sql-dblink.test.ts).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, freePort, startPostgres, withClient } from '../src/postgres-harness.js';
import { migrationPaths } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const ROWS = Number(process.env.SVC_DEMO_ROWS ?? 100_000);
const ENGINE_PASSWORD = randomBytes(16).toString('hex');
const APP = 'svc_demo_app';
const APP_PASSWORD = randomBytes(12).toString('hex');

async function run(c: pg.Client, sql: string, params: unknown[] = []): Promise<pg.QueryResult> {
  console.log(`\n${sql.replace(/\s+/g, ' ').trim()}`);
  const notices = (n: { message?: string }) => console.log(`  NOTICE: ${n.message}`);
  c.on('notice', notices);
  const started = process.hrtime.bigint();
  try {
    const result = await c.query(sql, params);
    for (const row of result.rows ?? []) console.log(`  ${Object.values(row).map((v) => (v === null ? '(null)' : String(v))).join(' | ')}`);
    return result;
  } finally {
    c.off('notice', notices);
    console.log(`  (${(Number(process.hrtime.bigint() - started) / 1e9).toFixed(2)} s)`);
  }
}

async function timed(what: string, use: () => Promise<unknown>): Promise<void> {
  const started = process.hrtime.bigint();
  await use();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(`  => ${what}: ${Math.round(ROWS / seconds)} rows/s (${ROWS} rows in ${seconds.toFixed(2)} s)`);
}

async function main(): Promise<void> {
  const postgres = await startPostgres();
  const pgPort = await freePort();
  let engine: RunningEngine | undefined;
  try {
    engine = await startEngine({
      bootstrap: testBootstrap(),
      env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD },
    });
    const url = await createDatabase(postgres.adminUrl, 'svc_demo_dblink');
    console.log(`dblink bridge, ${ROWS}-row column; engine wire endpoint on port ${pgPort}, PostgreSQL ${postgres.source}`);

    console.log('\n=== the DBA: only dblink, the migrations, the server, the mapping, a grant');
    await withClient(url, async (c) => {
      await run(c, 'CREATE EXTENSION dblink');
      await c.query("SET svc.bridge = 'dblink'");
      for (const path of migrationPaths()) {
        console.log(`\n-- ${path.slice(path.indexOf('sql/'))}`);
        await c.query(readFileSync(path, 'utf8'));
      }
      await run(c, `CREATE SERVER svc_engine FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '${pgPort}', dbname 'svc', connect_timeout '5', tcp_user_timeout '10000')`);
      await c.query(`CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (user 'svc', password '${ENGINE_PASSWORD}')`);
      console.log('\nCREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (user \'svc\', password \'…\')');
      await c.query(`DROP ROLE IF EXISTS ${APP}`);
      await c.query(`CREATE ROLE ${APP} LOGIN NOSUPERUSER PASSWORD '${APP_PASSWORD}'`);
      console.log(`\nCREATE ROLE ${APP} LOGIN NOSUPERUSER PASSWORD '…'`);
      await run(c, `GRANT svc_user TO ${APP}`);
      await run(c, `GRANT CREATE ON SCHEMA public TO ${APP}`);
      await run(c, 'SELECT string_agg(extname, \', \' ORDER BY extname) AS extensions FROM pg_extension');
      await run(c, 'SELECT string_agg(lanname, \', \' ORDER BY lanname) AS languages FROM pg_language');
    });

    console.log(`\n=== the application role ${APP} (not a superuser)`);
    const asApp = new URL(url);
    asApp.username = APP;
    asApp.password = APP_PASSWORD;
    await withClient(asApp.toString(), async (c) => {
      await run(c, 'SELECT rolsuper FROM pg_roles WHERE rolname = current_user');
      await run(c, `CREATE TABLE customers AS SELECT g AS id, 'user' || g || '@example.com' AS email FROM generate_series(1, ${ROWS}) g;
        ALTER TABLE customers ADD PRIMARY KEY (id)`);
      await timed('svc_encrypt_column', () => run(c, `CALL svc_encrypt_column('customers', 'email', '${POLICIES.random}', 10000)`));
      await run(c, 'SELECT count(*) FILTER (WHERE email LIKE \'hub:%\') AS encrypted, count(*) AS total FROM customers');
      await timed('svc_decrypt(text[]) over the column', () =>
        run(c, `SELECT count(*) AS read_back FROM unnest((SELECT svc_decrypt(array_agg(email ORDER BY id)) FROM customers)) WITH ORDINALITY AS p(v, i)
                 WHERE p.v = 'user' || p.i || '@example.com'`),
      );
      // One round trip per row: a sample of the column is enough to show the rate.
      const sample = Math.min(ROWS, 10_000);
      const started = process.hrtime.bigint();
      await run(c, `SELECT count(*) AS read_back FROM customers WHERE id <= ${sample} AND svc_decrypt(email) = 'user' || id || '@example.com'`);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      console.log(`  => svc_decrypt(text) per row: ${Math.round(sample / seconds)} rows/s (${sample} rows in ${seconds.toFixed(2)} s)`);
    });
  } finally {
    await engine?.dispose();
    await postgres.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
