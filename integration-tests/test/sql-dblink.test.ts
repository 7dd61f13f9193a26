// The dblink bridge end to end: a real PostgreSQL 15 with the committed migrations applied with
// svc.bridge = 'dblink', a foreign server and a user mapping made by the DBA, and the engine as a real
// process serving its PostgreSQL wire endpoint. Everything the application does runs as an ordinary
// role (NOSUPERUSER, granted svc_user), including the attempts to send values to another address, which
// a TCP listener proves never arrive.
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { clientBinDir, createDatabase, dropDatabase, freePort, sqlFailure, withClient } from '../src/postgres-harness.js';
import { applyMigrations, createAppRole, migrationPaths, runTool, setDblinkServer, uninstall } from '../src/sql-install.js';
import { startTrap } from '../src/trap-listener.js';
import { startStallingProxy, waitForPort } from '../src/tcp-proxy.js';
import { POLICIES, POLICY_NAME, testBootstrap } from '../src/test-policies.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_dblink_it';
const INSTALL_DB = 'svc_dblink_install_it';
const APP = 'svc_dblink_it_app';
const APP_PASSWORD = 'app-password-7';
const ENGINE_PASSWORD = 'dblink-it-engine-password';
const CIPHERTEXT = /^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$/;

let engine: RunningEngine;
let url: string;
let appUrl: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- result rows are whatever the SQL selects; the assertions check them.
type Row = Record<string, any>;

function asApp<T>(use: (c: pg.Client) => Promise<T>): Promise<T> {
  return withClient(appUrl, use);
}

function asAdmin<T>(use: (c: pg.Client) => Promise<T>): Promise<T> {
  return withClient(url, use);
}

/**
 * Restarts the engine and waits for its wire endpoint: the engine answers GET /api/health (what the
 * process harness waits for) a moment before the wire listener is up.
 */
async function restartEngine(): Promise<void> {
  await engine.restart();
  await waitForPort(engine.pgPort as number);
}

beforeAll(async () => {
  const pgPort = await freePort();
  engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD },
  });
  url = await createDatabase(adminUrl, DB);
  await applyMigrations(url, { 'svc.bridge': 'dblink' });
  // What the DBA does once (docs/sql.md): the engine's address and the credentials.
  await setDblinkServer(url, { port: pgPort, password: ENGINE_PASSWORD });
  appUrl = await createAppRole(url, APP, APP_PASSWORD);
  await asAdmin(async (c) => {
    await c.query('CREATE TABLE customers (id int PRIMARY KEY, email text)');
    await c.query(`GRANT ALL ON customers TO ${APP}`);
    await c.query('CREATE TABLE audit_copy (v text)');
    await c.query(`GRANT ALL ON audit_copy TO ${APP}`);
  });
});

afterAll(async () => {
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
  await dropDatabase(adminUrl, INSTALL_DB);
  await withClient(adminUrl, (c) => c.query(`DROP ROLE IF EXISTS ${APP}`)).catch(() => {});
});

describe('install', () => {
  it('applies with psql -f and svc.bridge = dblink, re-applies without change, and uninstalls to the original schema', async () => {
    const binDir = await clientBinDir(adminUrl);
    const db = await createDatabase(adminUrl, INSTALL_DB);
    await withClient(db, (c) => c.query('CREATE EXTENSION dblink'));
    const dump = async () =>
      (await runTool(binDir, 'pg_dump', ['--schema-only', '--no-owner', '-d', db])).replace(/^\\(un)?restrict .*$/gm, '');
    const before = await dump();
    for (const path of migrationPaths()) {
      await runTool(binDir, 'psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', db, '-f', path], { PGOPTIONS: '-c svc.bridge=dblink' });
    }
    const installed = await dump();
    expect(installed).toContain('CREATE FUNCTION public.svc_encrypt(data text, policy_code text) RETURNS text');
    expect(installed).toContain('SECURITY DEFINER');
    expect(installed).toContain('REVOKE ALL ON FUNCTION public.dblink_connect(text, text) FROM PUBLIC');
    expect(installed).not.toContain('svc__encrypt(');
    // Without svc.bridge, a re-apply keeps the bridge already installed.
    await applyMigrations(db);
    expect(await dump()).toBe(installed);
    await uninstall(db);
    expect(await dump()).toBe(before);
  });

  it('says at install which timeouts the server options lack', async () => {
    const [bridgeMigration] = migrationPaths();
    const notices = () =>
      withClient(url, async (c) => {
        const seen: string[] = [];
        c.on('notice', (n) => seen.push(n.message ?? ''));
        await c.query(readFileSync(bridgeMigration as string, 'utf8'));
        return seen.filter((m) => m.includes('timeout'));
      });
    // The server of this file is made like setDblinkServer makes it: neither option.
    expect(await notices()).toEqual([
      'svc bridge: the options of the foreign server svc_engine have no connect_timeout and tcp_user_timeout: without them a connect, or a large command to an engine that stops reading, can hold a session beyond svc.timeout_ms and every cancel',
    ]);
    await asAdmin((c) => c.query("ALTER SERVER svc_engine OPTIONS (ADD connect_timeout '5', ADD tcp_user_timeout '10000')"));
    try {
      expect(await notices()).toEqual([]);
    } finally {
      await asAdmin((c) => c.query('ALTER SERVER svc_engine OPTIONS (DROP connect_timeout, DROP tcp_user_timeout)'));
    }
  });
});

describe('the dblink bridge as an ordinary role', () => {
  it('is installed in PL/pgSQL over dblink, needing no untrusted language', async () => {
    const rows = await asAdmin(async (c) =>
      (
        await c.query<Row>(`SELECT p.oid::regprocedure::text AS f, l.lanname, p.prosecdef
                              FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                             WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'svc%' ORDER BY 1`)
      ).rows,
    );
    expect(rows.map((r) => r.lanname).filter((l) => !['plpgsql', 'sql'].includes(l))).toEqual([]);
    expect(rows.find((r) => r.f === 'svc_encrypt(text,text)')?.prosecdef).toBe(true);
    expect(await asAdmin(async (c) => (await c.query("SELECT count(*)::int AS n FROM pg_extension WHERE extname LIKE 'plpython%' OR extname = 'plv8'")).rows[0].n)).toBe(0);
  });

  it('round-trips scalars by code and by name, NULL and the empty string', async () => {
    await asApp(async (c) => {
      expect((await c.query('SELECT rolsuper FROM pg_roles WHERE rolname = current_user')).rows[0].rolsuper).toBe(false);
      const row = (
        await c.query<Row>(
          `SELECT svc_encrypt('alice@example.com', $1) AS gcm1, svc_encrypt('alice@example.com', $1) AS gcm2,
                  svc_encrypt('alice@example.com', $2) AS siv1, svc_encrypt('alice@example.com', $2) AS siv2,
                  svc_encrypt_by_name('555-0100', $3) AS latest, svc_encrypt_by_name('555-0100', $3, 1) AS v1,
                  svc_encrypt('555-0100', $3, NULL) AS alias, svc_encrypt(NULL, $1) AS n1, svc_decrypt(NULL::text) AS n2,
                  svc_encrypt_by_name(NULL, $3) AS n3, svc_decrypt(svc_encrypt('', $1)) AS empty`,
          [POLICIES.random, POLICIES.deterministic, POLICY_NAME],
        )
      ).rows[0] as Row;
      expect(row.gcm1).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
      expect(row.gcm1).not.toBe(row.gcm2);
      expect(row.siv1).toBe(row.siv2);
      expect(row.latest).toMatch(new RegExp(`^hub:${POLICIES.namedV2}:`));
      expect(row.v1).toMatch(new RegExp(`^hub:${POLICIES.namedV1}:`));
      expect(row.alias).toMatch(new RegExp(`^hub:${POLICIES.namedV2}:`));
      expect([row.n1, row.n2, row.n3, row.empty]).toEqual([null, null, null, '']);
      const back = (await c.query<Row>('SELECT svc_decrypt($1) AS a, svc_decrypt($2) AS b, svc_decrypt($3) AS c', [row.gcm1, row.siv1, row.v1])).rows[0];
      expect(back).toEqual({ a: 'alice@example.com', b: 'alice@example.com', c: '555-0100' });
      // One connection for the session, named after the foreign server.
      const health = (await c.query<Row>('SELECT svc_health() AS h')).rows[0]?.h;
      expect(health.status).toBe('UP');
      const info = (await c.query<Row>('SELECT svc_engine_info() AS i')).rows[0]?.i;
      expect(info).toMatchObject({ bridge: 'dblink', engineServer: 'svc_engine', engineAddress: { host: '127.0.0.1' }, timeoutMs: 5000, batchSize: 1000 });
      expect(info.runtime).toMatchObject({ configured: true, runtimeVersion: 'integration-tests' });
      expect(JSON.stringify(info)).not.toContain(ENGINE_PASSWORD);
    });
  });

  it('raises the engine errors with the bridge SQLSTATEs', async () => {
    await asApp(async (c) => {
      const unknown = await sqlFailure(c.query("SELECT svc_encrypt('x', 'NO_SUCH_POLICY')"));
      expect(unknown.code).toBe('SV001');
      expect(unknown.message).toBe('svc_encrypt: policy not found: NO_SUCH_POLICY');
      const tampered = await sqlFailure(c.query("SELECT svc_decrypt('hub:PII_EMAIL:AAAA')"));
      expect(tampered.code).toBe('SV001');
      expect(tampered.message).toMatch(/^svc_decrypt: /);
      // The session's connection is still usable after an error.
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['ok', POLICIES.random])).rows[0]?.v).toBe('ok');
      const badSetting = await sqlFailure(c.query("SET svc.timeout_ms = 'soon'; SELECT svc_encrypt('x', 'PII_EMAIL')"));
      expect(badSetting.code).toBe('SV003');
      expect(badSetting.message).toContain('svc.timeout_ms');
    });
  });

  it('sends arrays in chunks of svc.batch_size, keeping order and NULL elements', async () => {
    await asApp(async (c) => {
      await c.query("SET svc.batch_size = '3'");
      const values = ['a', null, 'b', '', 'c', 'd', null, 'e', 'f', 'g'];
      const enc = (await c.query<Row>('SELECT svc_encrypt($1::text[], $2) AS v', [values, POLICIES.random])).rows[0]?.v as (string | null)[];
      expect(enc.map((v) => (v === null ? null : CIPHERTEXT.test(v)))).toEqual(values.map((v) => (v === null ? null : true)));
      const dec = (await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [enc])).rows[0]?.v;
      expect(dec).toEqual(values);
      expect((await c.query<Row>("SELECT svc_encrypt('{}'::text[], 'PII_EMAIL') AS v")).rows[0]?.v).toEqual([]);
      // One bad element fails the whole call; DETAIL counts over the whole array.
      const bad = await sqlFailure(c.query('SELECT svc_decrypt($1::text[])', [[enc[0], enc[2], enc[3], enc[4], 'not a ciphertext']]));
      expect(bad.code).toBe('SV001');
      expect(bad.detail).toBe('item 5 of 5');
    });
  });

  it('keeps order and NULLs across many chunks two at a time, and an error in a middle chunk leaves the next calls working', async () => {
    await asApp(async (c) => {
      await c.query("SET svc.batch_size = '2'");
      const values = Array.from({ length: 23 }, (_, i) => (i % 5 === 3 ? null : `v${i}`));
      const enc = (await c.query<Row>('SELECT svc_encrypt($1::text[], $2) AS v', [values, POLICIES.random])).rows[0]?.v as (string | null)[];
      expect(enc.map((v) => (v === null ? null : CIPHERTEXT.test(v)))).toEqual(values.map((v) => (v === null ? null : true)));
      expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [enc])).rows[0]?.v).toEqual(values);
      // The lower bound of the array is kept.
      expect((await c.query<Row>("SELECT svc_decrypt(svc_encrypt('[0:2]={a,NULL,b}'::text[], $1))::text AS v", [POLICIES.random])).rows[0]?.v)
        .toBe('[0:2]={a,NULL,b}');
      // Item 7 of the non-NULL values is bad: its chunk fails while the next one is already with the engine.
      const nonNull = enc.filter((v): v is string => v !== null);
      const tampered = [...nonNull.slice(0, 6), 'hub:PII_EMAIL:AAAA', ...nonNull.slice(7)];
      const bad = await sqlFailure(c.query('SELECT svc_decrypt($1::text[])', [tampered]));
      expect(bad.code).toBe('SV001');
      expect(bad.message).toMatch(/^svc_decrypt: /);
      expect(bad.detail).toBe(`item 7 of ${nonNull.length}`);
      // No half-read answer is left behind: the next calls get their own answers.
      expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [nonNull])).rows[0]?.v).toEqual(values.filter((v) => v !== null));
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['one', POLICIES.random])).rows[0]?.v).toBe('one');
    });
  });

  it('encrypts and decrypts a column in place with the bulk procedures', async () => {
    await asApp(async (c) => {
      await c.query('TRUNCATE customers');
      await c.query("INSERT INTO customers SELECT i, 'user' || i || '@example.com' FROM generate_series(1, 2500) i");
      await c.query("CALL svc_encrypt_column('customers', 'email', $1, 1000)", [POLICIES.random]);
      const counts = (await c.query<Row>('SELECT count(*) FILTER (WHERE email ~ \'^hub:PII_EMAIL:\')::int AS enc, count(*)::int AS n FROM customers')).rows[0];
      expect(counts).toEqual({ enc: 2500, n: 2500 });
      await c.query("CALL svc_decrypt_column('customers', 'email')");
      const wrong = (await c.query<Row>("SELECT count(*)::int AS n FROM customers WHERE email <> 'user' || id || '@example.com'")).rows[0];
      expect(wrong?.n).toBe(0);
    });
  });

  it('round-trips any text: quotes, backslashes, $$, semicolons, Unicode (fuzzed)', async () => {
    await asApp(async (c) => {
      const text = fc.string({ unit: 'binary', maxLength: 60 }).map((s) => s.replace(/\u0000/g, '').replace(/[\uD800-\uDFFF]/g, 'x'));
      const tricky = fc.constantFrom("'", "''", '\\', '$$', '$svc$', ';', ' ', '-', '=', '\n', '\r\n', '\t', '--', '/*', 'é', '🎉', '\u202e', '\uFEFF');
      const value = fc.array(fc.oneof(text, tricky), { maxLength: 6 }).map((parts) => parts.join(''));
      await fc.assert(
        fc.asyncProperty(value, fc.array(fc.option(value, { nil: null }), { maxLength: 8 }), async (one, many) => {
          const row = (
            await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $3)) AS one, svc_decrypt(svc_encrypt($2::text[], $3)) AS many', [
              one,
              many,
              POLICIES.random,
            ])
          ).rows[0];
          expect(row?.one).toBe(one);
          expect(row?.many).toEqual(many);
        }),
        { numRuns: 150 },
      );
    });
  });
});

describe('failures', () => {
  it('sends arrays ahead and collects them later, as the other bridges do', async () => {
    await asApp(async (c) => {
      const send = (op: string, values: unknown, policy: string | null = null) =>
        c.query<Row>('SELECT svc_array_send($1, $2::text[], $3) AS n', [op, values, policy]).then((r) => r.rows[0]?.n as number);
      const collect = (op: string, values: unknown, policy: string | null = null) =>
        c.query<Row>('SELECT svc_array_collect($1, $2::text[], $3) AS v', [op, values, policy]).then((r) => r.rows[0]?.v as string[]);
      const notSent = { code: '55000', message: 'svc_array_collect: this session has no array sent ahead with these arguments' };

      const first = ['d1', null, 'd2', "it's $$ ; \\ Zoë"];
      const second = Array.from({ length: 300 }, (_, i) => `second-${i}`);
      expect(await send('encrypt', first, POLICIES.random)).toBe(3);
      expect(await send('encrypt', second, POLICIES.deterministic)).toBe(300);
      // Calls in between use their own connection.
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['between', POLICIES.random])).rows[0]?.v).toBe('between');
      const secondOut = await collect('encrypt', second, POLICIES.deterministic);
      const firstOut = await collect('encrypt', first, POLICIES.random);
      expect(firstOut[1]).toBeNull();
      expect(secondOut.every((v) => CIPHERTEXT.test(v))).toBe(true);
      expect(await sqlFailure(collect('encrypt', first, POLICIES.random))).toMatchObject(notSent);
      expect(await send('decrypt', firstOut)).toBe(3);
      expect(await collect('decrypt', firstOut)).toEqual(first);

      // A third send discards the oldest; arguments are checked.
      await send('encrypt', ['one'], POLICIES.random);
      await send('encrypt', ['two'], POLICIES.random);
      await send('encrypt', ['three'], POLICIES.random);
      expect(await sqlFailure(collect('encrypt', ['one'], POLICIES.random))).toMatchObject(notSent);
      expect(await sqlFailure(collect('encrypt', ['two'], POLICIES.deterministic))).toMatchObject(notSent);
      const two = await collect('encrypt', ['two'], POLICIES.random);
      const three = await collect('encrypt', ['three'], POLICIES.random);
      expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [[...two, ...three]])).rows[0]?.v).toEqual(['two', 'three']);
      expect(await sqlFailure(send('decrypt', ['x'], POLICIES.random))).toMatchObject({
        code: '22023',
        message: 'svc_array_send: decrypt takes no policy code',
      });

      // An engine error names the item over the whole array; the session goes on.
      const items = [...secondOut.slice(0, 199), 'garbage', ...secondOut.slice(200)];
      await send('decrypt', items);
      expect(await sqlFailure(collect('decrypt', items))).toMatchObject({ code: 'SV001', detail: 'item 200 of 300' });
      await send('decrypt', secondOut);
      expect(await collect('decrypt', secondOut)).toEqual(second);

      // A send rolled back with its transaction is not collected, and its answer is never read.
      await c.query('BEGIN');
      await send('encrypt', ['rolled back'], POLICIES.random);
      await c.query('ROLLBACK');
      expect(await sqlFailure(collect('encrypt', ['rolled back'], POLICIES.random))).toMatchObject(notSent);
      await send('encrypt', ['after'], POLICIES.random);
      const after = await collect('encrypt', ['after'], POLICIES.random);
      expect((await c.query<Row>('SELECT svc_decrypt($1) AS v', [after[0]])).rows[0]?.v).toBe('after');

      // An answer lost to an engine restart is asked for again at collect.
      await send('encrypt', first, POLICIES.random);
      await restartEngine();
      const again = await collect('encrypt', first, POLICIES.random);
      expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [again])).rows[0]?.v).toEqual(first);
    });
  });

  it('reconnects once when the engine restarted in mid-session', async () => {
    await asApp(async (c) => {
      await c.query("SET svc.batch_size = '2'");
      const before = (await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['before', POLICIES.random])).rows[0]?.v;
      // An array of several chunks opens both of the array forms' connections.
      const many = ['m1', 'm2', 'm3', 'm4', 'm5'];
      const manyEnc = (await c.query<Row>('SELECT svc_encrypt($1::text[], $2) AS v', [many, POLICIES.random])).rows[0]?.v;
      await restartEngine();
      const after = (await c.query<Row>('SELECT svc_decrypt($1) AS a, svc_decrypt(svc_encrypt($2, $3)) AS b', [before, 'after', POLICIES.random])).rows[0];
      expect(after).toEqual({ a: 'before', b: 'after' });
      await restartEngine();
      expect((await c.query<Row>('SELECT svc_decrypt($1::text[]) AS v', [manyEnc])).rows[0]?.v).toEqual(many);
    });
  });

  it('fails with SV002 when the engine is down, and the statement writes nothing', async () => {
    await asApp(async (c) => {
      await c.query('TRUNCATE audit_copy');
      expect((await c.query<Row>('SELECT svc_encrypt($1, $2) AS v', ['warm', POLICIES.random])).rows[0]?.v).toMatch(CIPHERTEXT);
      await engine.stop();
      try {
        // statement_timeout far above svc.timeout_ms: the bridge must give up first, with its own error.
        await c.query("SET svc.timeout_ms = '3000'; SET statement_timeout = '60s'");
        const down = await sqlFailure(c.query("INSERT INTO audit_copy SELECT svc_encrypt('v' || i, 'PII_EMAIL') FROM generate_series(1, 50) i"));
        expect(down.code).toBe('SV002');
        expect(down.message).toBe('svc_encrypt: engine at foreign server svc_engine is unreachable');
        // CONTEXT names the function called, not the bridge's internal functions.
        expect(down.where).toMatch(/^PL\/pgSQL function svc_encrypt\(text,text\) line \d+ at RAISE$/);
        const downArray = await sqlFailure(c.query("SELECT svc_encrypt(ARRAY['a', 'b'], 'PII_EMAIL')"));
        expect(downArray.code).toBe('SV002');
        expect((await c.query<Row>('SELECT count(*)::int AS n FROM audit_copy')).rows[0]?.n).toBe(0);
      } finally {
        await restartEngine();
      }
      // The same session works again once the engine is back.
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['back', POLICIES.random])).rows[0]?.v).toBe('back');
    });
  });

  it('gives up after svc.timeout_ms when the engine hangs, and a statement_timeout ends the wait', async () => {
    const proxy = await startStallingProxy(engine.pgPort as number);
    await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${proxy.port}', ADD connect_timeout '2')`));
    try {
      await asApp(async (c) => {
        await c.query('TRUNCATE audit_copy');
        const warm = async (value: string) =>
          expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', [value, POLICIES.random])).rows[0]?.v).toBe(value);
        await warm('warm');
        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '500'; SET statement_timeout = '60s'");
        const hung = await sqlFailure(c.query("INSERT INTO audit_copy SELECT svc_encrypt('v' || i, 'PII_EMAIL') FROM generate_series(1, 5) i"));
        expect(hung.code).toBe('SV002');
        expect(hung.message).toBe('svc_encrypt: engine at foreign server svc_engine did not answer within svc.timeout_ms (500 ms)');
        proxy.stall(false);
        // The abandoned connection is not reused: the next call gets a fresh one and its own answer.
        await warm('after a timeout');

        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '60000'; SET statement_timeout = '300ms'");
        const cancelled = await sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')"));
        expect(cancelled.code).toBe('57014');
        proxy.stall(false);
        await c.query('RESET statement_timeout');
        await warm('after a cancel');

        // The array forms, two chunks in flight: the same, and neither connection is reused half-read.
        const many = ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7'];
        const warmMany = async () =>
          expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [many, POLICIES.random])).rows[0]?.v).toEqual(many);
        await c.query("SET svc.batch_size = '2'");
        await warmMany();
        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '500'");
        const hungMany = await sqlFailure(c.query('SELECT svc_encrypt($1::text[], $2)', [many, POLICIES.random]));
        expect(hungMany.code).toBe('SV002');
        expect(hungMany.message).toBe('svc_encrypt: engine at foreign server svc_engine did not answer within svc.timeout_ms (500 ms)');
        proxy.stall(false);
        await warmMany();
        proxy.stall(true);
        await c.query("SET svc.timeout_ms = '60000'; SET statement_timeout = '300ms'");
        expect((await sqlFailure(c.query('SELECT svc_encrypt($1::text[], $2)', [many, POLICIES.random]))).code).toBe('57014');
        proxy.stall(false);
        await c.query('RESET statement_timeout');
        await warmMany();
        await warm('after the arrays');
        expect((await c.query<Row>('SELECT count(*)::int AS n FROM audit_copy')).rows[0]?.n).toBe(0);
      });
    } finally {
      proxy.stall(false);
      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${engine.pgPort}', DROP connect_timeout)`));
      await proxy.close();
    }
  });

  it("with svc.dblink_wait = 'block' waits on the socket: the same answers; a cancel or statement_timeout ends the wait, svc.timeout_ms does not", async () => {
    await asApp(async (c) => {
      const invalid = await sqlFailure(c.query("SET svc.dblink_wait = 'sometimes'; SELECT svc_encrypt('x', 'PII_EMAIL')"));
      expect(invalid.code).toBe('SV003');
      expect(invalid.message).toBe('svc.dblink_wait must be poll or block, got "sometimes"');
      await c.query("SET svc.dblink_wait = 'block'; SET svc.batch_size = '2'");
      const values = ['b1', null, 'b2', 'b3', '', 'b4', 'b5'];
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0]?.v).toEqual(values);
      expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['one', POLICIES.random])).rows[0]?.v).toBe('one');
      // The bulk procedures wait for the chunks they sent ahead the same way.
      await c.query('TRUNCATE customers');
      await c.query("INSERT INTO customers SELECT i, 'user' || i || '@example.com' FROM generate_series(1, 2500) i");
      await c.query("CALL svc_encrypt_column('customers', 'email', $1, 1000)", [POLICIES.random]);
      expect((await c.query<Row>("SELECT count(*)::int AS n FROM customers WHERE email ~ '^hub:PII_EMAIL:'")).rows[0]?.n).toBe(2500);
      await c.query("CALL svc_decrypt_column('customers', 'email')");
      expect((await c.query<Row>("SELECT count(*)::int AS n FROM customers WHERE email <> 'user' || id || '@example.com'")).rows[0]?.n).toBe(0);
    });
    // Every answer of the engine arrives 1.2 s late.
    const proxy = await startStallingProxy(engine.pgPort as number, 1200);
    await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${proxy.port}')`));
    try {
      await asApp(async (c) => {
        await c.query("SET svc.dblink_wait = 'block'; SET svc.timeout_ms = '500'");
        // Polling (the default), svc.timeout_ms would end this call after 0.5 s.
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['late', POLICIES.random])).rows[0]?.v).toBe('late');
        await c.query("SET statement_timeout = '300ms'");
        const started = performance.now();
        const cancelled = await sqlFailure(c.query("SELECT svc_encrypt('v', 'PII_EMAIL')"));
        expect(cancelled.code).toBe('57014');
        expect(performance.now() - started).toBeLessThan(1100);
        await c.query("RESET statement_timeout; RESET svc.dblink_wait; SET svc.timeout_ms = '5000'");
        // The connection the cancel left is not reused half-read: the next call (polling again) gets its own answer.
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['after', POLICIES.random])).rows[0]?.v).toBe('after');
      });
    } finally {
      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${engine.pgPort}')`));
      await proxy.close();
    }
  });

  it('with tcp_user_timeout in the server options, a large command to an engine that stops reading gives up instead of holding the session', async () => {
    // dblink writes a command in one blocking send: once the socket buffers are full, nothing in PostgreSQL
    // (svc.timeout_ms, statement_timeout, a cancel, pg_terminate_backend) ends it; the kernel does, after
    // tcp_user_timeout without progress.
    const proxy = await startStallingProxy(engine.pgPort as number);
    await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${proxy.port}', ADD tcp_user_timeout '1000', ADD connect_timeout '2')`));
    try {
      await asApp(async (c) => {
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['warm', POLICIES.random])).rows[0]?.v).toBe('warm');
        proxy.deafen(true);
        await c.query("SET svc.timeout_ms = '1000'");
        const started = performance.now();
        // 5 MB: a command of 6.7 million characters, more than the socket buffers hold.
        const stuck = await sqlFailure(c.query("SELECT length(svc_encrypt(repeat('x', 5000000), 'PII_EMAIL'))"));
        expect(stuck.code).toBe('SV002');
        expect(stuck.message).toBe('svc_encrypt: engine at foreign server svc_engine is unreachable');
        expect(performance.now() - started).toBeLessThan(15_000);
        proxy.deafen(false);
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['after', POLICIES.random])).rows[0]?.v).toBe('after');
      });
    } finally {
      proxy.deafen(false);
      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${engine.pgPort}', DROP tcp_user_timeout, DROP connect_timeout)`));
      await proxy.close();
    }
  });

  it('sends an array over one connection when the engine refuses a second', async () => {
    const pgPort = await freePort();
    const small = await startEngine({
      bootstrap: testBootstrap(),
      env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: ENGINE_PASSWORD, SVC_PG_MAX_CONNECTIONS: '1' },
    });
    await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${pgPort}')`));
    try {
      await asApp(async (c) => {
        await c.query("SET svc.batch_size = '2'");
        const values = ['s1', null, 's2', 's3', 's4', 's5'];
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0]?.v).toEqual(values);
        expect((await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['one', POLICIES.random])).rows[0]?.v).toBe('one');
      });
    } finally {
      await asAdmin((c) => c.query(`ALTER SERVER svc_engine OPTIONS (SET port '${engine.pgPort}')`));
      await small.dispose();
    }
  });

  it('refuses a wrong password in the user mapping with a clear error', async () => {
    await asAdmin((c) => c.query("ALTER USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (SET password 'wrong-password')"));
    try {
      const error = await asApp((c) => sqlFailure(c.query("SELECT svc_encrypt('x', 'PII_EMAIL')")));
      expect(error.code).toBe('SV003');
      expect(error.message).toBe('svc_encrypt: the engine refused the credentials of the user mapping for server svc_engine');
      expect(error.detail).toContain('password authentication failed for user "svc"');
      expect(`${error.message} ${error.detail} ${error.hint}`).not.toContain('wrong-password');
    } finally {
      await asAdmin((c) => c.query(`ALTER USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (SET password '${ENGINE_PASSWORD}')`));
    }
  });
});

describe('the engine address belongs to the DBA', () => {
  it('an ordinary role cannot make the database send values anywhere else', async () => {
    const trap = await startTrap();
    const elsewhere = `host=127.0.0.1 port=${trap.port} dbname=x user=x password=x connect_timeout=2`;
    try {
      await asApp(async (c) => {
        // Settings: the dblink bridge reads no address from them.
        await c.query(`SET svc.engine_url = 'http://127.0.0.1:${trap.port}'`);
        expect((await c.query<Row>("SELECT svc_encrypt('secret-1', 'PII_EMAIL') AS v")).rows[0]?.v).toMatch(CIPHERTEXT);
        // PostgreSQL 15 refuses ALTER ROLE … SET of an extension's setting to a non-superuser; were it allowed,
        // the next session below would still reach only the engine.
        await c.query(`ALTER ROLE ${APP} SET svc.engine_url = 'http://127.0.0.1:${trap.port}'`).catch((e: pg.DatabaseError) => {
          expect(e.code).toBe('42501');
        });
      });
      await asApp(async (c) => {
        expect((await c.query<Row>("SELECT svc_encrypt('secret-2', 'PII_EMAIL') AS v")).rows[0]?.v).toMatch(CIPHERTEXT);
        // Taking over the bridge's connection name: dblink's functions are not PUBLIC any more.
        for (const statement of [
          'SELECT dblink_disconnect(\'svc_engine\')',
          `SELECT dblink_connect('svc_engine', '${elsewhere}')`,
          `SELECT dblink_connect_u('svc_engine', '${elsewhere}')`,
          'SELECT * FROM dblink(\'svc_engine\', \'svc_health\') AS t(a text, b text, c text)',
        ]) {
          const denied = await sqlFailure(c.query(statement));
          expect(denied.code, statement).toBe('42501');
        }
        // The internal functions: not executable, and none takes an address.
        for (const statement of [
          'SELECT svc__dblink_connect(\'svc_encrypt\', \'svc_engine_2\')',
          'SELECT svc__dblink_array(\'svc_encrypt\', \'svc_decrypt_many\', ARRAY[\'x\'])',
          'SELECT svc__dblink_connect(\'svc_encrypt\')',
          'SELECT svc__dblink_setting(\'svc.timeout_ms\', 1, 2)',
        ]) {
          expect((await sqlFailure(c.query(statement))).code, statement).toBe('42501');
        }
        const http = await sqlFailure(c.query(`SELECT svc__encrypt('secret-3', 'PII_EMAIL', ARRAY['http://127.0.0.1:${trap.port}', '5000', '1000', NULL])`));
        expect(http.code).toBe('42883');
        // Another server or a user mapping of its own: no privilege on the wrapper or the server.
        expect((await sqlFailure(c.query(`CREATE SERVER evil FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '${trap.port}')`))).code).toBe('42501');
        expect((await sqlFailure(c.query('CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (user \'x\', password \'x\')'))).code).toBe('42501');
        // Shadowing catalog names with temporary objects changes nothing (pinned search_path).
        await c.query('CREATE TEMP TABLE pg_foreign_server (srvname name, srvoptions text[])');
        await c.query(`INSERT INTO pg_temp.pg_foreign_server VALUES ('svc_engine', ARRAY['host=127.0.0.1', 'port=${trap.port}'])`);
        expect((await c.query<Row>("SELECT svc_decrypt(svc_encrypt('secret-4', 'PII_EMAIL')) AS v")).rows[0]?.v).toBe('secret-4');
      });
    } finally {
      await asAdmin((c) => c.query(`ALTER ROLE ${APP} RESET svc.engine_url`));
      await trap.close();
    }
    expect(trap.connections()).toBe(0);
    expect(trap.bytes()).toBe(0);
  });
});
