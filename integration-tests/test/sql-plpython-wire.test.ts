// The PL/Python bridge over the engine's PostgreSQL wire endpoint (option wire_url of the server
// svc_engine, credentials in the owner's user mapping; docs/sql.md): a real PostgreSQL 15 with the
// committed migrations, psycopg2 in its Python, and the engine as a real process. The application runs
// as an ordinary role granted svc_user.
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, freePort, sqlFailure, withClient } from '../src/postgres-harness.js';
import { applyMigrations, createAppRole, setEngineServer } from '../src/sql-install.js';
import { startStallingProxy, waitForPort } from '../src/tcp-proxy.js';
import { POLICIES, POLICY_NAME, testBootstrap } from '../src/test-policies.js';
import { eventually } from '../src/engine-client.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_plpython_wire_it';
const APP = 'svc_plpython_wire_app';
const APP_PASSWORD = 'app-password-wire-3';
const ENGINE_PASSWORD = 'plpython-wire-engine-password';

let engine: RunningEngine;
let url: string;
let appUrl: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- result rows are whatever the SQL selects; the assertions check them.
type Row = Record<string, any>;

const asApp = <T>(use: (c: pg.Client) => Promise<T>) => withClient(appUrl, use);
const asAdmin = <T>(use: (c: pg.Client) => Promise<T>) => withClient(url, use);

/** The server and user mapping a DBA creates for the wire transport, the wire endpoint at `port`. */
function pointAt(port: number, password = ENGINE_PASSWORD): Promise<void> {
  return setEngineServer(url, { url: engine.url, wire: { url: `postgresql://127.0.0.1:${port}/svc`, user: 'svc', password } });
}

beforeAll(async () => {
  const pgPort = await freePort();
  engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD },
  });
  await waitForPort(pgPort);
  url = await createDatabase(adminUrl, DB);
  await applyMigrations(url);
  await pointAt(pgPort);
  appUrl = await createAppRole(url, APP, APP_PASSWORD);
  await asAdmin(async (c) => {
    await c.query('CREATE TABLE written (v text)');
    await c.query(`GRANT ALL ON written TO ${APP}`);
  });
});

afterAll(async () => {
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
  await withClient(adminUrl, (c) => c.query(`DROP ROLE IF EXISTS ${APP}`)).catch(() => {});
});

describe('over the wire endpoint', () => {
  it('round-trips per row, by name, in arrays (order and NULLs kept across chunks) and reports the transport', async () => {
    await asApp(async (c) => {
      const { gcm, siv1, siv2, named } = (
        await c.query<Row>('SELECT svc_encrypt($1, $2) AS gcm, svc_encrypt($1, $3) AS siv1, svc_encrypt($1, $3) AS siv2, svc_encrypt_by_name($1, $4, 1) AS named', [
          'bob@example.com',
          POLICIES.random,
          POLICIES.deterministic,
          POLICY_NAME,
        ])
      ).rows[0] as Row;
      expect(gcm).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
      expect(siv1).toBe(siv2);
      expect(named).toMatch(new RegExp(`^hub:${POLICIES.namedV1}:`));
      expect((await c.query<Row>('SELECT svc_decrypt($1) AS a, svc_decrypt($2) AS b', [gcm, siv1])).rows[0]).toEqual({ a: 'bob@example.com', b: 'bob@example.com' });

      const values = ['a', null, '', 'Zoë', null, 'e', 'f'];
      await c.query("SET svc.batch_size = '2'");
      const back = (await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0]?.v;
      expect(back).toEqual(values);
      const terms = (await c.query<Row>('SELECT svc_equality_terms($1, $2) AS t', ['bob@example.com', POLICIES.deterministic])).rows[0]?.t;
      expect(terms).toContain(siv1);

      const info = (await c.query<Row>('SELECT svc_engine_info() AS i')).rows[0]?.i;
      expect(info).toMatchObject({ bridge: 'plpython3u', wireUrl: `postgresql://127.0.0.1:${engine.pgPort}/svc`, health: { status: 'UP' } });
      expect(JSON.stringify(info)).not.toContain(ENGINE_PASSWORD);
    });
  });

  it('round-trips any text: quotes, backslashes, $$, semicolons, spaces and any Unicode', async () => {
    await asApp(async (c) => {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.string({ unit: 'grapheme', maxLength: 40 }).filter((s) => !s.includes('\u0000')), { minLength: 1, maxLength: 8 }), async (values) => {
          const one = (await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', [values[0], POLICIES.random])).rows[0]?.v;
          expect(one).toBe(values[0]);
          const many = (await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.deterministic])).rows[0]?.v;
          expect(many).toEqual(values);
        }),
        { numRuns: 60 },
      );
      const tricky = "'; DROP TABLE written; --  $$ \\ \" \n svc_encrypt -";
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', [tricky, POLICIES.random])).rows[0]?.v).toBe(tricky);
    });
  });

  it('raises the engine errors with their SQLSTATE, and names the failing element over the whole array', async () => {
    await asApp(async (c) => {
      const unknown = await sqlFailure(c.query("SELECT svc_encrypt('x', 'NO_SUCH_POLICY')"));
      expect(unknown).toMatchObject({ code: 'SV001', message: 'svc_encrypt: policy not found: NO_SUCH_POLICY' });
      const good = (await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['x', POLICIES.random])).rows[0]?.v;
      await c.query("SET svc.batch_size = '2'");
      const inArray = await sqlFailure(c.query('SELECT svc_decrypt($1::text[])', [[good, null, good, good, 'garbage']]));
      expect(inArray).toMatchObject({ code: 'SV001', message: 'svc_decrypt: malformed ciphertext', detail: 'item 4 of 4' });
      const version = await sqlFailure(c.query('SELECT svc_encrypt_by_name($1, $2, 0)', ['x', POLICY_NAME]));
      expect(version).toMatchObject({ code: 'SV001', message: 'svc_encrypt: policyVersion must be a positive integer' });
    });
  });

  it('sends the chunks of an array over two connections, one in flight on each; a failing chunk leaves no answer behind', async () => {
    const proxy = await startStallingProxy(engine.pgPort as number, 20);
    await pointAt(proxy.port);
    try {
      await asApp(async (c) => {
        await c.query("SET svc.batch_size = '2'");
        expect((await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['one', POLICIES.random])).rows[0]?.v).toMatch(/^hub:/);
        expect(proxy.open()).toBe(1);
        const values = Array.from({ length: 9 }, (_, i) => `chunked-${i}`);
        const encrypted = (await c.query<Row>('SELECT svc_encrypt($1::text[], $2) AS v', [values, POLICIES.random])).rows[0]?.v as string[];
        expect(proxy.open()).toBe(2);
        expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [encrypted])).rows[0]?.v).toEqual(values);

        // Chunk 2 fails while chunk 3 is on its way on the other connection.
        const items = [...encrypted.slice(0, 3), 'garbage', ...encrypted.slice(3)];
        expect(await sqlFailure(c.query('SELECT svc_decrypt($1::text[])', [items]))).toMatchObject({ code: 'SV001', detail: 'item 4 of 10' });
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0]?.v).toEqual(values);
      });
    } finally {
      await pointAt(engine.pgPort as number);
      await proxy.close();
    }
  });

  it('sends arrays ahead on connections of their own, and the bulk procedures run over them', async () => {
    const proxy = await startStallingProxy(engine.pgPort as number);
    await pointAt(proxy.port);
    try {
      await asApp(async (c) => {
        expect((await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['one', POLICIES.random])).rows[0]?.v).toMatch(/^hub:/);
        const first = ['w1', null, 'w2'];
        const second = ['w3', 'w4'];
        expect((await c.query<Row>('SELECT svc_array_send($1, $2::text[], $3) AS n', ['encrypt', first, POLICIES.random])).rows[0]?.n).toBe(2);
        await c.query('SELECT svc_array_send($1, $2::text[], $3)', ['encrypt', second, POLICIES.deterministic]);
        // The call's connection, and one for each array ahead.
        expect(proxy.open()).toBe(3);
        expect((await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['between', POLICIES.random])).rows[0]?.v).toMatch(/^hub:/);
        const collect = (op: string, values: unknown, policy: string | null) =>
          c.query<Row>('SELECT svc_array_collect($1, $2::text[], $3) AS v', [op, values, policy]).then((r) => r.rows[0]?.v as string[]);
        const enc = [...(await collect('encrypt', first, POLICIES.random)), ...(await collect('encrypt', second, POLICIES.deterministic))];
        expect(enc[1]).toBeNull();
        const items = [...enc.slice(0, 3), 'garbage', enc[4]];
        await c.query('SELECT svc_array_send($1, $2::text[])', ['decrypt', items]);
        expect(await sqlFailure(collect('decrypt', items, null))).toMatchObject({ code: 'SV001', detail: 'item 3 of 4' });
        await c.query('SELECT svc_array_send($1, $2::text[])', ['decrypt', enc]);
        expect(await collect('decrypt', enc, null)).toEqual([...first, ...second]);

        await c.query("TRUNCATE written; INSERT INTO written SELECT 'row-' || g FROM generate_series(1, 25) g");
      });
      await asAdmin((c) => c.query('ALTER TABLE written ADD COLUMN id serial PRIMARY KEY'));
      await asApp(async (c) => {
        await c.query("CALL svc_encrypt_column('written', 'v', $1, 10)", [POLICIES.random]);
        expect((await c.query<Row>("SELECT count(*)::int AS n FROM written WHERE v LIKE 'hub:%'")).rows[0]?.n).toBe(25);
        await c.query("CALL svc_decrypt_column('written', 'v', 10)");
        const rows = (await c.query<Row>('SELECT v FROM written ORDER BY id')).rows.map((r) => r.v);
        expect(rows).toEqual(Array.from({ length: 25 }, (_, i) => `row-${i + 1}`));
      });
    } finally {
      await asAdmin((c) => c.query('ALTER TABLE written DROP COLUMN id; TRUNCATE written'));
      await pointAt(engine.pgPort as number);
      await proxy.close();
    }
  });

  it('goes on over one connection when the engine refuses a second one (SVC_PG_MAX_CONNECTIONS=1)', async () => {
    const pgPort = await freePort();
    const single = await startEngine({
      bootstrap: testBootstrap(),
      env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD, SVC_PG_MAX_CONNECTIONS: '1' },
    });
    try {
      await waitForPort(pgPort);
      await pointAt(pgPort);
      await asApp(async (c) => {
        await c.query("SET svc.batch_size = '3'");
        const values = Array.from({ length: 10 }, (_, i) => `single-${i}`);
        for (let round = 0; round < 2; round++) {
          expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0]?.v).toEqual(values);
        }
      });
    } finally {
      await pointAt(engine.pgPort as number);
      await single.dispose();
    }
  });
});

describe('failures over the wire', () => {
  it('reconnects once when the engine restarted in mid-session; fails with SV002 while it is down, writing nothing', async () => {
    await asApp(async (c) => {
      const before = (await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['before', POLICIES.random])).rows[0]?.v;
      await engine.restart();
      await waitForPort(engine.pgPort as number);
      const after = (await c.query<Row>('SELECT svc_decrypt($1) AS a, svc_decrypt(svc_encrypt($2, $3)) AS b', [before, 'after', POLICIES.random])).rows[0];
      expect(after).toEqual({ a: 'before', b: 'after' });

      await engine.stop();
      try {
        await c.query("SET svc.timeout_ms = '3000'; SET statement_timeout = '60s'");
        const down = await sqlFailure(c.query("INSERT INTO written SELECT svc_encrypt('v' || i, 'PII_EMAIL') FROM generate_series(1, 20) i"));
        expect(down.code).toBe('SV002');
        expect(down.message).toContain(`engine at postgresql://127.0.0.1:${engine.pgPort}/svc is unreachable`);
        expect(down.where).toMatch(/^PL\/pgSQL function public\.svc_encrypt\(text,text\) line \d+ at RAISE$/);
        expect((await c.query<Row>('SELECT count(*)::int AS n FROM written')).rows[0]?.n).toBe(0);
      } finally {
        await engine.restart();
        await waitForPort(engine.pgPort as number);
      }
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['back', POLICIES.random])).rows[0]?.v).toBe('back');
    });
  });

  it('gives up after svc.timeout_ms when the engine hangs, a statement_timeout ends the wait, and the next call works', async () => {
    const proxy = await startStallingProxy(engine.pgPort as number);
    await pointAt(proxy.port);
    try {
      await asApp(async (c) => {
        const warm = async (value: string) =>
          expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', [value, POLICIES.random])).rows[0]?.v).toBe(value);
        await warm('warm');
        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '500'; SET statement_timeout = '60s'");
        const hung = await sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')"));
        expect(hung).toMatchObject({ code: 'SV002', message: `engine at postgresql://127.0.0.1:${proxy.port}/svc did not answer within svc.timeout_ms (500 ms)` });
        proxy.stall(false);
        await warm('after a timeout');

        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '60000'; SET statement_timeout = '300ms'");
        expect((await sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')"))).code).toBe('57014');
        proxy.stall(false);
        await c.query('RESET statement_timeout');
        await warm('after a cancel');
      });
    } finally {
      proxy.stall(false);
      await pointAt(engine.pgPort as number);
      await proxy.close();
    }
  });

  it('closes its wire connection when the server stops naming that endpoint, and goes on over HTTP', async () => {
    const proxy = await startStallingProxy(engine.pgPort as number);
    await pointAt(proxy.port);
    try {
      await asApp(async (c) => {
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['wire', POLICIES.random])).rows[0]?.v).toBe('wire');
        expect(proxy.open()).toBe(1);
        await asAdmin((a) => a.query('ALTER SERVER svc_engine OPTIONS (DROP wire_url)'));
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['http', POLICIES.random])).rows[0]?.v).toBe('http');
        await eventually('the wire connection through the proxy is closed', async () => proxy.open() === 0, 5000);
      });
    } finally {
      await pointAt(engine.pgPort as number);
      await proxy.close();
    }
  });

  it('refuses a wrong password, a missing mapping and credentials in wire_url with SV003, never showing the password', async () => {
    try {
      await pointAt(engine.pgPort as number, 'wrong-password');
      const wrong = await asApp((c) => sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')")));
      expect(wrong).toMatchObject({ code: 'SV003', message: 'the engine refused the credentials of the user mapping for server svc_engine' });
      expect(wrong.detail).toContain('password authentication failed for user "svc"');
      expect(`${wrong.message} ${wrong.detail} ${wrong.hint}`).not.toContain('wrong-password');

      await asAdmin((c) => c.query('DROP USER MAPPING FOR CURRENT_USER SERVER svc_engine'));
      const missing = await asApp((c) => sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')")));
      expect(missing.code).toBe('SV003');
      expect(missing.hint).toContain('CREATE USER MAPPING');

      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET wire_url 'postgresql://svc:${ENGINE_PASSWORD}@127.0.0.1:${engine.pgPort}/svc')`));
      const inUrl = await asApp((c) => sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')")));
      expect(inUrl).toMatchObject({ code: 'SV003', message: 'option wire_url of the foreign server svc_engine must not hold a user or password' });
      expect(`${inUrl.message} ${inUrl.detail} ${inUrl.hint}`).not.toContain(ENGINE_PASSWORD);
      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET wire_url 'host=127.0.0.1 port=${engine.pgPort} dbname=svc sslpassword=key-secret')`));
      const keyPassword = await asApp((c) => sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')")));
      expect([keyPassword.code, keyPassword.message]).toEqual(['SV003', inUrl.message]);
    } finally {
      await pointAt(engine.pgPort as number);
    }
    // The ordinary role cannot read the credentials.
    const mappings = await asApp((c) => c.query<Row>("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'svc_engine'"));
    expect(JSON.stringify(mappings.rows)).not.toContain(ENGINE_PASSWORD);
  });
});
