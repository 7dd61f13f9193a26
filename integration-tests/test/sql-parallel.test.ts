// Queries whose plan could go parallel, in every bridge that runs here. A parallel plan puts even its
// leader in parallel mode, where PostgreSQL refuses the subtransactions the bridges start (dblink's
// error handling on every call; PL/Python's interrupt check while it waits for a slow answer). With the
// planner pushed hard towards parallel plans, the bridge calls must still run, and slow answers too.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, freePort, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setDblinkServer, setEngineServer } from '../src/sql-install.js';
import { startStallingProxy } from '../src/tcp-proxy.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const adminUrl = inject('databaseUrl');
const ENGINE_PASSWORD = 'sql-parallel-engine-password';
const BRIDGES = ['plpython3u', 'dblink'] as const;
const ROWS = 2000;
const PARALLEL = 'SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2';

let engine: RunningEngine;
let slow: { port: number; close: () => Promise<void> };
const urls = new Map<string, string>();

beforeAll(async () => {
  const pgPort = await freePort();
  engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD },
  });
  slow = await startStallingProxy(Number(new URL(engine.url).port), 120);
  for (const bridge of BRIDGES) {
    const url = await createDatabase(adminUrl, `svc_parallel_${bridge}_it`);
    urls.set(bridge, url);
    await applyMigrations(url, { 'svc.bridge': bridge });
    if (bridge === 'dblink') await setDblinkServer(url, { port: pgPort, password: ENGINE_PASSWORD });
    else await setEngineServer(url, { url: engine.url });
    await withClient(url, (c) =>
      c.query(`CREATE TABLE t AS SELECT g AS id, svc_encrypt('v' || g, '${POLICIES.random}') AS v FROM generate_series(1, ${ROWS}) g; ANALYZE t`),
    );
  }
}, 120_000);

afterAll(async () => {
  await slow?.close();
  await engine?.dispose();
  for (const bridge of BRIDGES) await dropDatabase(adminUrl, `svc_parallel_${bridge}_it`).catch(() => undefined);
});

describe.each(BRIDGES)('a query the planner would run in parallel, %s bridge', (bridge) => {
  it('runs the bridge calls without a parallel plan, in the select list and in the filter', async () => {
    await withClient(urls.get(bridge) as string, async (c) => {
      await c.query(PARALLEL);
      // The same scan without a bridge call does go parallel: the settings work.
      const plain = await c.query('EXPLAIN (COSTS OFF) SELECT v FROM t WHERE id % 2 = 0');
      expect(plain.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('Gather');
      const listed = await c.query('SELECT svc_decrypt(v) AS p FROM t WHERE id % 2 = 0 ORDER BY id');
      expect(listed.rows).toHaveLength(ROWS / 2);
      expect(listed.rows[0].p).toBe('v2');
      const filtered = await c.query('SELECT count(*)::int AS n FROM t WHERE svc_decrypt(v) LIKE \'v%\'');
      expect(filtered.rows[0].n).toBe(ROWS);
    });
  });
});

describe('a slow engine under a plan that could go parallel (PL/Python)', () => {
  it('waits for each answer, checking for a cancel, without failing', async () => {
    const url = urls.get('plpython3u') as string;
    await setEngineServer(url, { url: `http://127.0.0.1:${slow.port}` });
    try {
      await withClient(url, async (c) => {
        await c.query(PARALLEL);
        const { rows } = await c.query('SELECT count(*)::int AS n FROM t WHERE id <= 4 AND svc_decrypt(v) LIKE \'v%\'');
        expect(rows[0].n).toBe(4);
      });
    } finally {
      await setEngineServer(url, { url: engine.url });
    }
  });
});
