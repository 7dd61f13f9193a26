// End to end through PL/Python: a real PostgreSQL with the committed migrations applied, the engine
// started as a real process with known keys, and SQL as users write it.
import { type AddressInfo, createServer, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { BINARY_FRAME_TYPE, decodeResponseFrame, encodeRequestFrame } from '../../engine/src/http/codecs/binary-frame.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { type FaultProxy, startFaultProxy } from '../src/fault-proxy.js';
import { createDatabase, dropDatabase, sqlFailure, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setEngineServer } from '../src/sql-install.js';
import { POLICIES, POLICY_NAME, testBootstrap } from '../src/test-policies.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_bridge_it';
const CIPHERTEXT = /^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$/;

let url: string;
let engine: RunningEngine;
let proxy: FaultProxy;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- result rows are whatever the SQL selects; the assertions check them.
type Row = Record<string, any>;

/** Runs statements on a fresh session (the server svc_engine points the bridge at the engine, through the proxy). */
async function sql(text: string, params: unknown[] = []): Promise<Row[]> {
  return withClient(url, async (c) => (await c.query<Row>(text, params)).rows);
}

/** The first row of a query's result. */
async function one(text: string, params: unknown[] = []): Promise<Row> {
  const rows = await sql(text, params);
  if (!rows[0]) throw new Error(`no row from: ${text}`);
  return rows[0];
}

async function sqlError(
  use: (c: pg.Client) => Promise<unknown>,
): Promise<{ code?: string; message: string; hint?: string }> {
  return withClient(url, async (c) => {
    try {
      await use(c);
    } catch (error) {
      const e = error as pg.DatabaseError;
      return { code: e.code, message: e.message, hint: e.hint };
    }
    throw new Error('the statement was expected to fail');
  });
}

beforeAll(async () => {
  engine = await startEngine({ bootstrap: testBootstrap() });
  proxy = await startFaultProxy(engine.url);
  url = await createDatabase(adminUrl, DB);
  await applyMigrations(url);
  await setEngineServer(url, { url: proxy.url });
});

afterAll(async () => {
  await proxy?.close();
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
});

describe('svc_encrypt / svc_decrypt round trips', () => {
  it('round-trips with the randomized (GCM) and the deterministic (SIV) policy', async () => {
    const row = await one(
      `SELECT svc_encrypt('alice@example.com', $1) AS gcm1, svc_encrypt('alice@example.com', $1) AS gcm2,
              svc_encrypt('alice@example.com', $2) AS siv1, svc_encrypt('alice@example.com', $2) AS siv2`,
      [POLICIES.random, POLICIES.deterministic],
    );
    expect(row.gcm1).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
    expect(row.gcm1).not.toBe(row.gcm2);
    expect(row.siv1).toMatch(new RegExp(`^hub:${POLICIES.deterministic}:`));
    expect(row.siv1).toBe(row.siv2);
    const back = await one('SELECT svc_decrypt($1) AS a, svc_decrypt($2) AS b', [row.gcm1, row.siv1]);
    expect(back).toEqual({ a: 'alice@example.com', b: 'alice@example.com' });
  });

  it('returns NULL for NULL without calling the engine, and round-trips the empty string', async () => {
    proxy.counts.clear();
    const row = await one(
      `SELECT svc_encrypt(NULL, $1) AS e, svc_decrypt(NULL::text) AS d, svc_encrypt_by_name(NULL, $2) AS n,
              svc_decrypt(svc_encrypt('', $1)) AS empty`,
      [POLICIES.random, POLICY_NAME],
    );
    expect(row).toEqual({ e: null, d: null, n: null, empty: '' });
    expect(proxy.counts.get('/api/encrypt/batch')).toBe(1);
  });

  it('round-trips Unicode and a 1 MB value', async () => {
    const unicode = 'Zoë · 東京 · 🙂🙃 · \u202e · ﬁ · \u00a0';
    const big = 'x'.repeat(512 * 1024) + 'é'.repeat(256 * 1024);
    const row = await one('SELECT svc_decrypt(svc_encrypt($1, $3)) AS u, svc_decrypt(svc_encrypt($2, $3)) AS big', [
      unicode,
      big,
      POLICIES.random,
    ]);
    expect(row.u).toBe(unicode);
    expect(row.big.length).toBe(big.length);
    expect(row.big === big).toBe(true);
  });

  it('resolves an untyped literal to the scalar form', async () => {
    const row = await one(
      `SELECT pg_typeof(svc_encrypt('abc', '${POLICIES.random}'))::text AS e,
              pg_typeof(svc_decrypt(svc_encrypt('abc', '${POLICIES.random}')))::text AS d`,
    );
    expect(row).toEqual({ e: 'text', d: 'text' });
  });

  it('encrypts by policy name: the latest version by default, a given version on request', async () => {
    const row = await one(
      `SELECT svc_encrypt_by_name('555-0100', $1) AS latest, svc_encrypt_by_name('555-0100', $1, 1) AS v1,
              svc_encrypt('555-0100', $1, NULL) AS alias_latest`,
      [POLICY_NAME],
    );
    expect(row.latest).toMatch(new RegExp(`^hub:${POLICIES.namedV2}:`));
    expect(row.v1).toMatch(new RegExp(`^hub:${POLICIES.namedV1}:`));
    expect(row.alias_latest).toMatch(new RegExp(`^hub:${POLICIES.namedV2}:`));
    const back = await one('SELECT svc_decrypt($1) AS a, svc_decrypt($2) AS b', [row.latest, row.v1]);
    expect(back).toEqual({ a: '555-0100', b: '555-0100' });
  });
});

describe('array forms', () => {
  it('keep order and NULL elements, and split large arrays into requests of svc.batch_size', async () => {
    const values = Array.from({ length: 25 }, (_, i) => (i % 6 === 3 ? null : `value-${i}`));
    proxy.counts.clear();
    const rows = await withClient(url, async (c) => {
      await c.query("SET svc.batch_size = '7'");
      return (await c.query('SELECT svc_encrypt($1::text[], $2) AS enc', [values, POLICIES.random])).rows;
    });
    const encrypted = rows[0].enc as Array<string | null>;
    expect(encrypted).toHaveLength(25);
    encrypted.forEach((v, i) => {
      if (values[i] === null) expect(v).toBeNull();
      else expect(v).toMatch(CIPHERTEXT);
    });
    // 21 non-NULL values in requests of 7.
    expect(proxy.counts.get('/api/encrypt/batch')).toBe(3);
    const back = await one('SELECT svc_decrypt($1::text[]) AS dec', [encrypted]);
    expect(back.dec).toEqual(values);
  });

  it('returns an empty or all-NULL array as it came, without a request', async () => {
    proxy.counts.clear();
    const row = await one(
      'SELECT svc_encrypt(\'{}\'::text[], $1) AS empty, svc_encrypt(ARRAY[NULL, NULL]::text[], $1) AS nulls',
      [POLICIES.random],
    );
    expect(row).toEqual({ empty: [], nulls: [null, null] });
    expect(proxy.counts.size).toBe(0);
  });
});

describe('in tables', () => {
  it('UPDATE ... SET c = svc_encrypt(c, ...) then svc_decrypt gives the original values back', async () => {
    await sql(`DROP TABLE IF EXISTS people;
      CREATE TABLE people (id int PRIMARY KEY, email text);
      INSERT INTO people SELECT g, CASE WHEN g % 10 = 0 THEN NULL ELSE 'user' || g || '@example.com' END FROM generate_series(1, 200) g;`);
    await sql('UPDATE people SET email = svc_encrypt(email, $1)', [POLICIES.random]);
    const enc = await one("SELECT count(*)::int AS n FROM people WHERE email ~ '^hub:PII_EMAIL:'");
    expect(enc.n).toBe(180);
    const rows = await sql('SELECT id, svc_decrypt(email) AS email FROM people ORDER BY id');
    rows.forEach((r) => expect(r.email).toBe(r.id % 10 === 0 ? null : `user${r.id}@example.com`));
  });

  it('finds a row by equality on a deterministic ciphertext, through an index', async () => {
    await sql(`DROP TABLE IF EXISTS customers;
      CREATE TABLE customers (id int PRIMARY KEY, email text);
      INSERT INTO customers SELECT g, 'c' || g || '@example.com' FROM generate_series(1, 300) g;`);
    await sql('UPDATE customers SET email = svc_encrypt(email, $1)', [POLICIES.deterministic]);
    await sql('CREATE INDEX customers_email ON customers (email); ANALYZE customers');
    const query = 'SELECT id FROM customers WHERE email = (SELECT svc_encrypt($1, $2))';
    const found = await sql(query, ['c123@example.com', POLICIES.deterministic]);
    expect(found).toEqual([{ id: 123 }]);
    const plan = await withClient(url, async (c) => {
      await c.query('SET enable_seqscan = off');
      return (await c.query(`EXPLAIN ${query}`, ['c123@example.com', POLICIES.deterministic])).rows;
    });
    expect(JSON.stringify(plan)).toContain('customers_email');
  });

  it('writes nothing when one value of a statement fails', async () => {
    await sql(`DROP TABLE IF EXISTS notes;
      CREATE TABLE notes (id int PRIMARY KEY, body text);
      INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 50) g;`);
    const error = await sqlError((c) =>
      c.query('UPDATE notes SET body = svc_encrypt(body, CASE WHEN id = 40 THEN \'NO_SUCH_POLICY\' ELSE $1 END)', [
        POLICIES.random,
      ]),
    );
    expect(error.code).toBe('SV001');
    const arrayError = await sqlError((c) =>
      c.query(`UPDATE notes SET body = (svc_decrypt(ARRAY[body, 'hub:${POLICIES.random}:AQEAAAAB'])::text[])[1]`),
    );
    expect(arrayError.code).toBe('SV001');
    const plain = await one("SELECT count(*)::int AS n FROM notes WHERE body LIKE 'note %'");
    expect(plain.n).toBe(50);
  });
});

describe('errors', () => {
  it('an unknown policy raises SV001 with the engine message', async () => {
    const error = await sqlError((c) => c.query("SELECT svc_encrypt('x', 'NO_SUCH_POLICY')"));
    expect(error).toMatchObject({ code: 'SV001' });
    expect(error.message).toContain('svc_encrypt: policy not found: NO_SUCH_POLICY');
  });

  it('a tampered ciphertext raises SV001 "decryption failed"; a malformed one "malformed ciphertext"', async () => {
    const row = await one('SELECT svc_encrypt($1, $2) AS c', ['secret', POLICIES.random]);
    const c = row.c as string;
    const last = c.at(-2) === 'A' ? 'B' : 'A';
    const tampered = `${c.slice(0, -2)}${last}${c.at(-1)}`;
    const failed = await sqlError((cl) => cl.query('SELECT svc_decrypt($1)', [tampered]));
    expect(failed.code).toBe('SV001');
    expect(failed.message).toContain('svc_decrypt: decryption failed');
    expect(failed.message).not.toContain('secret');
    const malformed = await sqlError((cl) => cl.query("SELECT svc_decrypt('not a ciphertext')"));
    expect(malformed.code).toBe('SV001');
    expect(malformed.message).toContain('malformed ciphertext');
  });

  it('names the failing element of an array', async () => {
    const error = await withClient(url, async (c) => {
      try {
        await c.query("SELECT svc_decrypt(ARRAY['hub:PII_EMAIL:AQEAAAABAAAA', NULL, 'garbage'])");
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV001');
    expect(error.detail).toBe('item 1 of 2');
  });

  it('refuses a multi-dimensional array with 2202E, as the dblink bridge does', async () => {
    for (const [statement, name] of [
      ["SELECT svc_encrypt(ARRAY[['a'], ['b']], 'PII_EMAIL')", 'svc_encrypt'],
      ['SELECT svc_decrypt(ARRAY[[NULL, NULL]]::text[])', 'svc_decrypt'],
      ["SELECT svc_array_send('encrypt', ARRAY[['a'], ['b']], 'PII_EMAIL')", 'svc_array_send'],
    ]) {
      const error = await withClient(url, (c) => sqlFailure(c.query(statement as string)));
      expect(error).toMatchObject({ code: '2202E', message: `${name}: only one-dimensional arrays are supported` });
      expect(error.where).not.toMatch(/Traceback|PL\/Python/);
    }
  });

  it('an invalid setting raises SV003 naming it', async () => {
    const badTimeout = await sqlError(async (c) => {
      await c.query("SET svc.timeout_ms = 'soon'");
      await c.query("SELECT svc_encrypt('x', 'PII_EMAIL')");
    });
    expect(badTimeout).toMatchObject({ code: 'SV003' });
    expect(badTimeout.message).toContain('svc.timeout_ms must be an integer from 1 to 3600000, got "soon"');
    const badBatch = await sqlError(async (c) => {
      await c.query("SET svc.batch_size = '0'");
      await c.query("SELECT svc_encrypt(ARRAY['x'], 'PII_EMAIL')");
    });
    expect(badBatch.code).toBe('SV003');
  });

  it('settings follow the role and the session; the address does not', async () => {
    await sql(`DROP ROLE IF EXISTS svc_it_app; CREATE ROLE svc_it_app LOGIN IN ROLE svc_user;
      ALTER ROLE svc_it_app IN DATABASE ${DB} SET svc.timeout_ms = 'never';
      ALTER ROLE svc_it_app IN DATABASE ${DB} SET svc.engine_url = 'http://127.0.0.1:1'`);
    const asRole = new URL(url);
    asRole.username = 'svc_it_app';
    const error = await withClient(asRole.toString(), async (c) => {
      try {
        await c.query("SELECT svc_encrypt('x', 'PII_EMAIL')");
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV003');
    expect(error.message).toContain('svc.timeout_ms must be an integer');
    const ok = await withClient(asRole.toString(), async (c) => {
      await c.query("SET svc.timeout_ms = '4000'");
      return (await c.query("SELECT svc_encrypt('x', 'PII_EMAIL') AS c")).rows[0].c;
    });
    expect(ok).toMatch(CIPHERTEXT);
    await sql('DROP OWNED BY svc_it_app; DROP ROLE svc_it_app');
  });
});

describe('engine faults', () => {
  it('an engine that is down raises SV002 at once', async () => {
    // The DBA's change, in a transaction that is rolled back: other sessions keep the proxy.
    const error = await sqlError(async (c) => {
      await c.query("BEGIN; ALTER SERVER svc_engine OPTIONS (SET url 'http://127.0.0.1:1')");
      await c.query("SELECT svc_encrypt('x', 'PII_EMAIL')");
    });
    expect(error.code).toBe('SV002');
    expect(error.hint).toContain('Check the engine directly');
  });

  it('an engine that does not answer raises SV002 after svc.timeout_ms', async () => {
    proxy.mode = 'hang';
    try {
      const error = await sqlError(async (c) => {
        await c.query("SET svc.timeout_ms = '300'");
        await c.query("SELECT svc_encrypt('x', 'PII_EMAIL')");
      });
      expect(error.code).toBe('SV002');
      expect(error.message).toContain('did not answer within svc.timeout_ms (300 ms)');
    } finally {
      proxy.mode = 'forward';
      proxy.dropConnections();
    }
  });

  it('statement_timeout and a cancel interrupt a call waiting for the engine', async () => {
    proxy.mode = 'hang';
    try {
      const timedOut = await sqlError(async (c) => {
        await c.query("SET svc.timeout_ms = '600000'");
        await c.query("SET statement_timeout = '300ms'");
        await c.query("SELECT svc_encrypt('x', 'PII_EMAIL')");
      });
      expect(timedOut.code).toBe('57014');
      expect(timedOut.message).toContain('statement timeout');

      const canceled = await withClient(url, async (c) => {
        await c.query("SET svc.timeout_ms = '600000'");
        const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
        const before = proxy.counts.get('/api/encrypt/batch') ?? 0;
        const call = c.query("SELECT svc_encrypt('x', 'PII_EMAIL')").then(
          () => undefined,
          (e: pg.DatabaseError) => e,
        );
        while ((proxy.counts.get('/api/encrypt/batch') ?? 0) === before) await new Promise((r) => setTimeout(r, 20));
        await sql('SELECT pg_cancel_backend($1)', [pid]);
        return call;
      });
      expect(canceled?.code).toBe('57014');
      expect(canceled?.message).toContain('canceling statement due to user request');
    } finally {
      proxy.mode = 'forward';
      proxy.dropConnections();
    }
  });

  it('an engine that stops reading a large request: SV002 after svc.timeout_ms, and statement_timeout interrupts the send', async () => {
    proxy.mode = 'deaf';
    // One 16 MB value goes in a request of its own, more than the socket buffers hold: the send waits.
    const big = "SELECT length(svc_encrypt(repeat('x', 16000000), 'PII_EMAIL'))";
    try {
      const error = await sqlError(async (c) => {
        await c.query("SET svc.timeout_ms = '500'");
        await c.query(big);
      });
      expect(error.code).toBe('SV002');
      expect(error.message).toContain('did not answer within svc.timeout_ms (500 ms)');
      const started = performance.now();
      const timedOut = await sqlError(async (c) => {
        await c.query("SET svc.timeout_ms = '600000'; SET statement_timeout = '300ms'");
        await c.query(big);
      });
      expect(timedOut.code).toBe('57014');
      expect(performance.now() - started).toBeLessThan(5000);
    } finally {
      proxy.mode = 'forward';
      proxy.dropConnections();
    }
  });

  it('keeps one keep-alive connection per backend across calls, and a second one for arrays of several chunks', async () => {
    const before = proxy.connections();
    await withClient(url, async (c) => {
      for (let i = 0; i < 10; i++) await c.query('SELECT svc_decrypt(svc_encrypt($1, $2))', [`v${i}`, POLICIES.random]);
      await c.query('SELECT svc_encrypt($1::text[], $2)', [['a', 'b'], POLICIES.random]);
      expect(proxy.connections() - before).toBe(1);
      await c.query("SET svc.batch_size = '2'");
      for (let i = 0; i < 3; i++) await c.query('SELECT svc_encrypt($1::text[], $2)', [['a', 'b', 'c', 'd', 'e'], POLICIES.random]);
    });
    expect(proxy.connections() - before).toBe(2);
  });

  it('keeps one chunk of an array in flight on each of its two connections, in order', async () => {
    const values = Array.from({ length: 9 }, (_, i) => `chunked-${i}`);
    proxy.delayMs = 100;
    try {
      proxy.peak = 0;
      const back = await withClient(url, async (c) => {
        await c.query("SET svc.batch_size = '2'");
        const encrypted = (await c.query('SELECT svc_encrypt($1::text[], $2) AS v', [values, POLICIES.random])).rows[0].v;
        expect(proxy.peak).toBe(2);
        proxy.peak = 0;
        await c.query('SELECT svc_encrypt($1, $2)', ['one', POLICIES.random]);
        expect(proxy.peak).toBe(1);
        return (await c.query('SELECT svc_decrypt($1::text[]) AS v', [encrypted])).rows[0].v;
      });
      expect(back).toEqual(values);
    } finally {
      proxy.delayMs = 0;
    }
  });

  it('reopens both connections of an array once after the engine dropped them', async () => {
    const values = Array.from({ length: 7 }, (_, i) => `dropped-${i}`);
    await withClient(url, async (c) => {
      await c.query("SET svc.batch_size = '2'");
      const roundTrip = async () => (await c.query('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0].v;
      expect(await roundTrip()).toEqual(values);
      const before = proxy.connections();
      proxy.dropConnections();
      expect(await roundTrip()).toEqual(values);
      expect(proxy.connections() - before).toBe(2);
    });
  });

  it('a failing chunk with the next one in flight: names the item, and the next call reads its own answers', async () => {
    await withClient(url, async (c) => {
      const good = (await c.query('SELECT svc_encrypt($1, $2) AS v', ['x', POLICIES.random])).rows[0].v as string;
      await c.query("SET svc.batch_size = '2'");
      const items = [good, good, good, 'garbage', good, good, good, good];
      const error = await sqlFailure(c.query('SELECT svc_decrypt($1::text[])', [items]));
      expect(error).toMatchObject({ code: 'SV001', detail: 'item 4 of 8' });
      const values = Array.from({ length: 7 }, (_, i) => `after-${i}`);
      const back = (await c.query('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [values, POLICIES.random])).rows[0].v;
      expect(back).toEqual(values);
    });
  });

  it('reopens its connection once after the engine dropped it', async () => {
    await withClient(url, async (c) => {
      const first = (await c.query("SELECT svc_encrypt('a', 'PII_EMAIL') AS c")).rows[0].c;
      await engine.restart();
      proxy.dropConnections();
      const second = (await c.query('SELECT svc_decrypt($1) AS p', [first])).rows[0].p;
      expect(second).toBe('a');
    });
  });

  it('a connection reset on every attempt is an SV002 error, not a hang or a loop', async () => {
    proxy.mode = 'reset';
    try {
      proxy.counts.clear();
      const error = await sqlError((c) => c.query("SELECT svc_encrypt('a', 'PII_EMAIL')"));
      expect(error.code).toBe('SV002');
      expect(proxy.counts.get('/api/encrypt/batch')).toBeLessThanOrEqual(2);
    } finally {
      proxy.mode = 'forward';
    }
  });
});

describe('arrays sent ahead (svc_array_send / svc_array_collect)', () => {
  const send = (c: pg.Client, op: string, values: unknown, policy: string | null = null) =>
    c.query('SELECT svc_array_send($1, $2::text[], $3) AS n', [op, values, policy]).then((r) => r.rows[0].n as number);
  const collect = (c: pg.Client, op: string, values: unknown, policy: string | null = null) =>
    c.query('SELECT svc_array_collect($1, $2::text[], $3) AS v', [op, values, policy]).then((r) => r.rows[0].v as Array<string | null>);

  it('sends two arrays ahead at once and collects each later, with other calls of the session in between', async () => {
    const first = ['ahead-1', null, 'ahead-2', 'ahead-3'];
    const second = Array.from({ length: 5 }, (_, i) => `second-${i}`);
    proxy.delayMs = 100;
    try {
      await withClient(url, async (c) => {
        proxy.peak = 0;
        expect(await send(c, 'encrypt', first, POLICIES.random)).toBe(3);
        expect(await send(c, 'encrypt', second, POLICIES.deterministic)).toBe(5);
        const between = (await c.query('SELECT svc_decrypt(svc_encrypt($1, $2)) AS v', ['between', POLICIES.random])).rows[0].v;
        expect(between).toBe('between');
        // Neither send waited for its answer: both requests were at the engine at once (the proxy, in this
        // process, may count them only after the sends return).
        expect(proxy.peak).toBeGreaterThanOrEqual(2);
        const secondOut = await collect(c, 'encrypt', second, POLICIES.deterministic);
        const firstOut = await collect(c, 'encrypt', first, POLICIES.random);
        expect(firstOut[1]).toBeNull();
        expect([...firstOut.filter((v) => v !== null), ...secondOut].every((v) => CIPHERTEXT.test(v as string))).toBe(true);
        expect(await send(c, 'decrypt', firstOut)).toBe(3);
        expect(await collect(c, 'decrypt', firstOut)).toEqual(first);
        expect((await c.query('SELECT svc_decrypt($1::text[]) AS v', [secondOut])).rows[0].v).toEqual(second);
      });
    } finally {
      proxy.delayMs = 0;
    }
  });

  it('collects only what the session sent with the same arguments, once; a third send discards the oldest', async () => {
    await withClient(url, async (c) => {
      const notSent = async (statement: Promise<unknown>) => {
        const error = await sqlFailure(statement);
        expect(error).toMatchObject({ code: '55000', message: 'svc_array_collect: this session has no array sent ahead with these arguments' });
      };
      await notSent(collect(c, 'encrypt', ['a'], POLICIES.random));
      await send(c, 'encrypt', ['a', 'b'], POLICIES.random);
      await notSent(collect(c, 'encrypt', ['a', 'c'], POLICIES.random));
      await notSent(collect(c, 'encrypt', ['a', 'b'], POLICIES.deterministic));
      expect(await collect(c, 'encrypt', ['a', 'b'], POLICIES.random)).toHaveLength(2);
      await notSent(collect(c, 'encrypt', ['a', 'b'], POLICIES.random));
      await send(c, 'encrypt', ['one'], POLICIES.random);
      await send(c, 'encrypt', ['two'], POLICIES.random);
      await send(c, 'encrypt', ['three'], POLICIES.random);
      await notSent(collect(c, 'encrypt', ['one'], POLICIES.random));
      const three = await collect(c, 'encrypt', ['three'], POLICIES.random);
      const two = await collect(c, 'encrypt', ['two'], POLICIES.random);
      expect((await c.query('SELECT svc_decrypt($1::text[]) AS v', [[...two, ...three]])).rows[0].v).toEqual(['two', 'three']);
      expect(await send(c, 'encrypt', null, POLICIES.random)).toBe(0);
      expect(await collect(c, 'encrypt', null, POLICIES.random)).toBeNull();
    });
    for (const [op, policy, message] of [
      ['shred', null, "svc_array_send: op must be 'encrypt', 'decrypt' or 'rewrap'"],
      ['encrypt', null, 'svc_array_send: encrypt needs a policy code'],
      ['decrypt', POLICIES.random, 'svc_array_send: decrypt takes no policy code'],
    ] as const) {
      const error = await withClient(url, (c) => sqlFailure(send(c, op, ['x'], policy)));
      expect(error).toMatchObject({ code: '22023', message });
    }
  });

  it('names the failing item over the whole array, beyond one request, and the session goes on', async () => {
    await withClient(url, async (c) => {
      const good = (await c.query('SELECT svc_encrypt($1, $2) AS v', ['x', POLICIES.random])).rows[0].v as string;
      // More values than one request carries: the rest goes at collect, and is counted on from there.
      const items = Array.from({ length: 10_003 }, () => good);
      items[10_001] = 'garbage';
      await send(c, 'decrypt', items);
      expect(await sqlFailure(collect(c, 'decrypt', items))).toMatchObject({ code: 'SV001', detail: 'item 10002 of 10003' });
      items[10_001] = good;
      items[3] = 'garbage';
      await send(c, 'decrypt', items);
      expect(await sqlFailure(collect(c, 'decrypt', items))).toMatchObject({ code: 'SV001', detail: 'item 4 of 10003' });
      items[3] = good;
      await send(c, 'decrypt', items);
      const back = await collect(c, 'decrypt', items);
      expect(back).toHaveLength(10_003);
      expect(back.every((v) => v === 'x')).toBe(true);
    });
  });

  it('asks again at collect for an answer lost to a dropped connection', async () => {
    const values = ['lost-1', 'lost-2', null, 'lost-3'];
    proxy.delayMs = 200;
    try {
      await withClient(url, async (c) => {
        await send(c, 'encrypt', values, POLICIES.random);
        proxy.dropConnections();
        const out = await collect(c, 'encrypt', values, POLICIES.random);
        expect((await c.query('SELECT svc_decrypt($1::text[]) AS v', [out])).rows[0].v).toEqual(values);
      });
    } finally {
      proxy.delayMs = 0;
    }
  });

  it('the bulk procedure has the next chunk at the engine while it writes the last', async () => {
    await sql(`DROP TABLE IF EXISTS pipelined; CREATE TABLE pipelined (id int PRIMARY KEY, v text);
      INSERT INTO pipelined SELECT g, 'row-' || g FROM generate_series(1, 12) g`);
    proxy.delayMs = 100;
    try {
      proxy.peak = 0;
      await sql("CALL svc_encrypt_column('pipelined', 'v', $1, 3)", [POLICIES.random]);
      expect(proxy.peak).toBe(2);
    } finally {
      proxy.delayMs = 0;
    }
    const rows = await sql('SELECT id, svc_decrypt(v) AS v FROM pipelined ORDER BY id');
    expect(rows.map((r) => r.v)).toEqual(Array.from({ length: 12 }, (_, i) => `row-${i + 1}`));
  });
});

describe('the HTTP exchange', () => {
  /** A server that answers every request with the given raw HTTP response, then keeps the connection open. */
  async function rawServer(answer: string): Promise<{ url: string; close(): Promise<void> }> {
    const sockets = new Set<Socket>();
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
      socket.once('data', () => socket.write(answer));
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}`,
      close: () =>
        new Promise<void>((done) => {
          for (const socket of sockets) socket.destroy();
          server.close(() => done());
        }),
    };
  }

  async function answerError(answer: string): Promise<{ code?: string; message: string }> {
    const server = await rawServer(answer);
    await setEngineServer(url, { url: server.url });
    try {
      return await sqlError((c) => c.query("SELECT svc_encrypt('x', 'PII_EMAIL')"));
    } finally {
      await setEngineServer(url, { url: proxy.url });
      await server.close();
    }
  }

  it('refuses a chunked answer, an answer without a length and one over the size limit with SV002', async () => {
    const chunked = await answerError('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
    expect(chunked.code).toBe('SV002');
    expect(chunked.message).toContain('Transfer-Encoding: chunked');
    const unsized = await answerError('HTTP/1.1 200 OK\r\nContent-Type: application/x-svc-binary-frame\r\n\r\n');
    expect(unsized.code).toBe('SV002');
    expect(unsized.message).toContain('without a Content-Length');
    const huge = await answerError('HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n');
    expect(huge.code).toBe('SV002');
    expect(huge.message).toContain('more than the 67108864 the bridge accepts');
    const garbage = await answerError('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nSVCF');
    expect(garbage.code).toBe('SV002');
    expect(garbage.message).toContain('not a result frame');
  });

  it('reuses the parsed settings until one changes, then follows the change', async () => {
    const error = await withClient(url, async (c) => {
      await c.query("SELECT svc_encrypt('a', 'PII_EMAIL')");
      await c.query("SET svc.timeout_ms = '0'");
      try {
        await c.query("SELECT svc_encrypt('a', 'PII_EMAIL')");
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV003');
    expect(error.message).toContain('svc.timeout_ms');
  });

  it('reads the address once per statement: the next statement of a running session follows ALTER SERVER', async () => {
    const error = await withClient(url, async (c) => {
      await c.query("SELECT svc_encrypt('a', 'PII_EMAIL')");
      try {
        await setEngineServer(url, { url: 'http://127.0.0.1:1' });
        // One statement, many calls: the address is looked up for the statement, not per row.
        await c.query("SELECT svc_encrypt('v' || g, 'PII_EMAIL') FROM generate_series(1, 3) AS g");
      } catch (e) {
        return e as pg.DatabaseError;
      } finally {
        await setEngineServer(url, { url: proxy.url });
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV002');
    expect(error.message).toContain('engine at http://127.0.0.1:1 is unreachable');
    expect(await one("SELECT svc_decrypt(svc_encrypt('b', 'PII_EMAIL')) AS v")).toEqual({ v: 'b' });
  });

  it('refuses a policy version below 1 as the engine would', async () => {
    const error = await sqlError((c) => c.query('SELECT svc_encrypt_by_name($1, $2, 0)', ['x', POLICY_NAME]));
    expect(error.code).toBe('SV001');
    expect(error.message).toContain('policyVersion must be a positive integer');
  });

  it('a decrypted value that is not UTF-8 text raises SV001 naming the item', async () => {
    const frame = encodeRequestFrame('encrypt', [{ policyCode: POLICIES.random, data: Buffer.from([0xff, 0x00]) }]);
    const answer = await fetch(`${engine.url}/api/encrypt/batch`, {
      method: 'POST',
      headers: { 'content-type': BINARY_FRAME_TYPE },
      body: frame,
    });
    const [item] = decodeResponseFrame(Buffer.from(await answer.arrayBuffer())).items;
    const ciphertext = item?.data.toString('latin1');
    const error = await withClient(url, async (c) => {
      try {
        await c.query('SELECT svc_decrypt($1::text[])', [[ciphertext, null, ciphertext]]);
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV001');
    expect(error.message).toContain('svc_decrypt: decrypted data is not valid UTF-8');
    expect(error.detail).toBe('item 1 of 2');
  });
});

describe('roles, sessions and parallel plans', () => {
  it('a non-superuser with svc_user can call the functions; one without it cannot', async () => {
    await sql(`DROP ROLE IF EXISTS svc_it_with; DROP ROLE IF EXISTS svc_it_without;
      CREATE ROLE svc_it_with LOGIN IN ROLE svc_user; CREATE ROLE svc_it_without LOGIN;`);
    const as = (role: string) => {
      const u = new URL(url);
      u.username = role;
      return u.toString();
    };
    const value = await withClient(as('svc_it_with'), async (c) => {
      const enc = (await c.query("SELECT svc_encrypt('granted', 'PII_EMAIL') AS c")).rows[0].c;
      return (await c.query('SELECT svc_decrypt($1) AS p', [enc])).rows[0].p;
    });
    expect(value).toBe('granted');
    for (const call of ["SELECT svc_encrypt('x', 'PII_EMAIL')", "SELECT svc_decrypt('x')", 'SELECT svc_health()']) {
      const denied = await withClient(as('svc_it_without'), async (c) => {
        try {
          await c.query(call);
        } catch (e) {
          return e as pg.DatabaseError;
        }
        throw new Error('expected failure');
      });
      expect(denied.code).toBe('42501');
    }
    await sql('DROP ROLE svc_it_with; DROP ROLE svc_it_without');
  });

  it('8 concurrent sessions each get their own results', async () => {
    const sessions = Array.from({ length: 8 }, (_, s) =>
      withClient(url, async (c) => {
        const values = Array.from({ length: 50 }, (_, i) => `s${s}-v${i}`);
        const out: string[] = [];
        for (const v of values.slice(0, 10)) {
          const enc = (await c.query('SELECT svc_encrypt($1, $2) AS c', [v, POLICIES.random])).rows[0].c;
          out.push((await c.query('SELECT svc_decrypt($1) AS p', [enc])).rows[0].p);
        }
        const arr = (await c.query('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS a', [values, POLICIES.random]))
          .rows[0].a;
        return { out, arr, values };
      }),
    );
    for (const { out, arr, values } of await Promise.all(sessions)) {
      expect(out).toEqual(values.slice(0, 10));
      expect(arr).toEqual(values);
    }
  });

  it('keeps a query the planner would parallelize in one process (the bridge is PARALLEL UNSAFE), and answers it', async () => {
    await sql(`DROP TABLE IF EXISTS wide;
      CREATE TABLE wide (id int, v text) WITH (parallel_workers = 2);
      INSERT INTO wide SELECT g, 'w' || g FROM generate_series(1, 400) g; ANALYZE wide;`);
    // Everything pushes towards a parallel scan; a parallel plan would put the leader in parallel mode,
    // where the bridge's interrupt check (a subtransaction) fails. sql-parallel.test.ts covers each bridge.
    const query = `SELECT count(*)::int AS n FROM wide WHERE svc_decrypt(svc_encrypt(v, '${POLICIES.random}')) = v`;
    const result = await withClient(url, async (c) => {
      await c.query(`SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
        SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off`);
      const plan = (await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${query}`)).rows[0]['QUERY PLAN'];
      const rows = (await c.query(query)).rows[0];
      return { plan: JSON.stringify(plan), rows };
    });
    expect(result.plan).not.toContain('Gather');
    expect(result.rows).toEqual({ n: 400 });
  });
});

describe('svc_health and svc_engine_info', () => {
  it('report the engine and the settings in effect', async () => {
    const [info] = await withClient(url, async (c) => {
      await c.query("SET svc.batch_size = '250'");
      return (await c.query('SELECT svc_health() AS h, svc_engine_info() AS i')).rows;
    });
    expect(info.h).toMatchObject({ status: 'UP' });
    expect(info.i).toMatchObject({
      bridge: 'plpython3u',
      engineServer: 'svc_engine',
      engineUrl: proxy.url,
      opsUrl: proxy.url,
      batchSize: 250,
      timeoutMs: 5000,
    });
    expect(info.i.health).toMatchObject({ status: 'UP' });
  });
});
