// `npm run bench:sql`: rows per second of the SQL bridge in one run on one database, against pgcrypto's
// encrypt_iv over the same rows as the in-database reference: svc_encrypt per row, the array form, and
// the bulk procedure; the same for the dblink bridge (per row in 1 and 8 sessions), beside a dblink round
// trip to PostgreSQL itself as its floor. A measurement, not a test: it prints figures and asserts nothing.
// Settings: SVC_BENCH_ROWS (default 50000), SVC_BENCH_PER_ROW_ROWS (default 10000), SVC_BENCH_REPEAT (3).
import { loadavg, cpus } from 'node:os';
import { startEngine } from '../src/engine-process.js';
import { createDatabase, freePort, startPostgres, withClient } from '../src/postgres-harness.js';
import { applyMigrations } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const ROWS = Number(process.env.SVC_BENCH_ROWS ?? 50_000);
const PER_ROW_ROWS = Math.min(ROWS, Number(process.env.SVC_BENCH_PER_ROW_ROWS ?? 10_000));
const REPEAT = Number(process.env.SVC_BENCH_REPEAT ?? 3);
const KEY = "'\\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'::bytea";
const IV = "'\\x000102030405060708090a0b0c0d0e0f'::bytea";
const BENCH_PG_PASSWORD = 'bench-only-password';

interface Figure {
  name: string;
  rows: number;
  seconds: number;
}

async function main(): Promise<void> {
  const postgres = await startPostgres();
  const pgPort = await freePort();
  const engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: BENCH_PG_PASSWORD },
  });
  const figures: Figure[] = [];
  try {
    const url = await createDatabase(postgres.adminUrl, 'svc_bench');
    await applyMigrations(url);
    await withClient(url, async (c) => {
      await c.query('CREATE EXTENSION IF NOT EXISTS pgcrypto');
      await c.query(`ALTER DATABASE svc_bench SET svc.engine_url = '${engine.url}'`);
      await c.query(`CREATE TABLE src (id int PRIMARY KEY, v text);
        INSERT INTO src SELECT g, 'user' || g || '@example.com' FROM generate_series(1, ${ROWS}) g; ANALYZE src;`);
    });
    await withClient(url, async (c) => {
      await c.query(`SET svc.engine_url = '${engine.url}'`);
      const time = async (name: string, rows: number, sql: string, before?: string): Promise<void> => {
        let best = Number.POSITIVE_INFINITY;
        for (let i = 0; i < REPEAT; i++) {
          if (before) await c.query(before);
          const start = process.hrtime.bigint();
          await c.query(sql);
          best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
        }
        figures.push({ name, rows, seconds: best });
      };
      // Warm-up: load the bridge and open the engine connection in this backend.
      await c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}'), svc_encrypt(ARRAY['warm'], '${POLICIES.random}')`);
      await time('pgcrypto encrypt_iv (AES-256-CBC, reference)', ROWS,
        `SELECT count(encrypt_iv(convert_to(v, 'UTF8'), ${KEY}, ${IV}, 'aes-cbc')) FROM src`);
      await time('svc_encrypt per row', PER_ROW_ROWS,
        `SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE id <= ${PER_ROW_ROWS}`);
      await time('svc_encrypt(text[]) array form', ROWS,
        `SELECT cardinality(svc_encrypt(array_agg(v), '${POLICIES.random}')) FROM src`);
    });
    // The procedure commits, so it runs outside any transaction block, on a fresh copy each time.
    await withClient(url, async (c) => {
      let best = Number.POSITIVE_INFINITY;
      for (let i = 0; i < REPEAT; i++) {
        await c.query('DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT * FROM src; ALTER TABLE bulk ADD PRIMARY KEY (id)');
        const start = process.hrtime.bigint();
        await c.query(`CALL svc_encrypt_column('bulk', 'v', '${POLICIES.random}', 10000)`);
        best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
      }
      figures.push({ name: 'svc_encrypt_column bulk procedure', rows: ROWS, seconds: best });
    });
    figures.push(...(await dblinkFigures(postgres.adminUrl, pgPort)));
  } finally {
    await engine.dispose();
    await postgres.stop();
  }
  const reference = figures[0] as Figure;
  const rate = (f: Figure) => f.rows / f.seconds;
  console.log(`SQL bridge benchmark: ${ROWS} rows (${PER_ROW_ROWS} for per-row calls), best of ${REPEAT}, ` +
    `${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('method'.padEnd(48) + 'rows/s'.padStart(12) + 'x pgcrypto'.padStart(12));
  for (const f of figures) {
    console.log(f.name.padEnd(48) + Math.round(rate(f)).toString().padStart(12) + (rate(f) / rate(reference)).toFixed(4).padStart(12));
  }
}

/** The dblink bridge on a database of its own, through the engine's wire endpoint on `pgPort`. */
async function dblinkFigures(adminUrl: string, pgPort: number): Promise<Figure[]> {
  const figures: Figure[] = [];
  const url = await createDatabase(adminUrl, 'svc_bench_dblink');
  await applyMigrations(url, { 'svc.bridge': 'dblink' });
  const self = new URL(url);
  await withClient(url, async (c) => {
    await c.query(`CREATE SERVER svc_engine FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '${pgPort}', dbname 'svc')`);
    await c.query(`CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (user 'svc', password '${BENCH_PG_PASSWORD}')`);
    await c.query(`CREATE TABLE src (id int PRIMARY KEY, v text);
      INSERT INTO src SELECT g, 'user' || g || '@example.com' FROM generate_series(1, ${ROWS}) g; ANALYZE src;`);
  });
  const best = async (run: () => Promise<void>): Promise<number> => {
    let seconds = Number.POSITIVE_INFINITY;
    for (let i = 0; i < REPEAT; i++) {
      const start = process.hrtime.bigint();
      await run();
      seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
    }
    return seconds;
  };
  const perRow = `SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE id <= ${PER_ROW_ROWS}`;
  await withClient(url, async (c) => {
    await c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}')`);
    // Floor: one dblink round trip per row to PostgreSQL itself (SELECT <id> on a loopback connection).
    await c.query('SELECT dblink_connect(\'floor\', $1)', [
      `host=${self.hostname} port=${self.port || 5432} dbname=svc_bench_dblink user=${decodeURIComponent(self.username)}` +
        (self.password ? ` password=${decodeURIComponent(self.password)}` : ''),
    ]);
    figures.push({
      name: 'floor: dblink round trip to PostgreSQL per row',
      rows: PER_ROW_ROWS,
      seconds: await best(async () => {
        await c.query(`SELECT count((SELECT t.x FROM dblink('floor', 'SELECT ' || id) AS t(x int))) FROM src WHERE id <= ${PER_ROW_ROWS}`);
      }),
    });
    figures.push({ name: 'dblink: svc_encrypt per row', rows: PER_ROW_ROWS, seconds: await best(async () => void (await c.query(perRow))) });
    figures.push({
      name: 'dblink: svc_encrypt(text[]) array form',
      rows: ROWS,
      seconds: await best(async () => void (await c.query(`SELECT cardinality(svc_encrypt(array_agg(v), '${POLICIES.random}')) FROM src`))),
    });
  });
  // 8 sessions at once, each encrypting its share of the per-row rows.
  const sessions = 8;
  await Promise.all(Array.from({ length: sessions }, () => withClient(url, (c) => c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}')`))));
  figures.push({
    name: `dblink: svc_encrypt per row, ${sessions} sessions`,
    rows: PER_ROW_ROWS,
    seconds: await best(async () => {
      await Promise.all(
        Array.from({ length: sessions }, (_, k) =>
          withClient(url, (c) =>
            c.query(`SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE id <= ${PER_ROW_ROWS} AND id % ${sessions} = ${k}`),
          ),
        ),
      );
    }),
  });
  await withClient(url, async (c) => {
    let seconds = Number.POSITIVE_INFINITY;
    for (let i = 0; i < REPEAT; i++) {
      await c.query('DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT * FROM src; ALTER TABLE bulk ADD PRIMARY KEY (id)');
      const start = process.hrtime.bigint();
      await c.query(`CALL svc_encrypt_column('bulk', 'v', '${POLICIES.random}', 10000)`);
      seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
    }
    figures.push({ name: 'dblink: svc_encrypt_column bulk procedure', rows: ROWS, seconds });
  });
  return figures;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
