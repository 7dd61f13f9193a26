// The bulk procedures: encrypt (and decrypt) a column in place, in committed chunks, reporting progress,
// and resuming after an interruption without encrypting any value twice.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setEngineServer } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_bulk_it';
const CIPHERTEXT = "'^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$'";

let url: string;
let engine: RunningEngine;

async function count(where: string, table = 'accounts'): Promise<number> {
  return withClient(url, async (c) => Number((await c.query(`SELECT count(*) AS n FROM ${table} WHERE ${where}`)).rows[0]?.n));
}

/** Runs a CALL and collects its NOTICE messages. */
async function call(text: string, params: unknown[] = []): Promise<string[]> {
  return withClient(url, async (c) => {
    const notices: string[] = [];
    c.on('notice', (n) => notices.push(n.message ?? ''));
    await c.query(text, params);
    return notices;
  });
}

async function fill(table: string, rows: number): Promise<void> {
  await withClient(url, (c) =>
    c.query(`DROP TABLE IF EXISTS ${table};
      CREATE TABLE ${table} (id bigint PRIMARY KEY, email text, original text);
      INSERT INTO ${table} SELECT g, v, v FROM (
        SELECT g, CASE WHEN g % 17 = 0 THEN NULL ELSE 'person' || g || '@example.com' END AS v FROM generate_series(1, ${rows}) g) s;`),
  );
}

beforeAll(async () => {
  engine = await startEngine({ bootstrap: testBootstrap() });
  url = await createDatabase(adminUrl, DB);
  await applyMigrations(url);
  await setEngineServer(url, { url: engine.url });
});

afterAll(async () => {
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
});

describe('svc_encrypt_column / svc_decrypt_column', () => {
  it('encrypts a column in chunks with progress notices, and decrypts it back', async () => {
    await fill('accounts', 1200);
    const notices = await call('CALL svc_encrypt_column($1, $2, $3, 500)', ['accounts', 'email', POLICIES.random]);
    const nonNull = 1200 - Math.floor(1200 / 17);
    expect(notices.slice(0, 3).map((n) => n.replace(/, \d+ rows\/s$/, ''))).toEqual([
      'svc_encrypt_column: 500 rows done',
      'svc_encrypt_column: 1000 rows done',
      `svc_encrypt_column: ${nonNull} rows done`,
    ]);
    expect(notices[0]).toMatch(/, \d+ rows\/s$/);
    expect(notices.at(-1)).toMatch(new RegExp(`^svc_encrypt_column: finished, ${nonNull} rows in [0-9.]+ s$`));
    expect(await count(`email ~ ${CIPHERTEXT}`)).toBe(nonNull);
    expect(await count('email IS NULL')).toBe(1200 - nonNull);

    await call('CALL svc_decrypt_column($1, $2, 500)', ['accounts', 'email']);
    expect(await count('email IS DISTINCT FROM original')).toBe(0);
  });

  it('starts with a chunk of 1000 rows and doubles it up to chunk_rows, so the first answer comes soon', async () => {
    await fill('ramp', 9000);
    const nonNull = 9000 - Math.floor(9000 / 17);
    const done = (notices: string[]) => notices.filter((n) => n.includes('rows done')).map((n) => Number(/: (\d+) rows done/.exec(n)?.[1]));
    expect(done(await call('CALL svc_encrypt_column($1, $2, $3, 3000)', ['ramp', 'email', POLICIES.random]))).toEqual([1000, 3000, 6000, nonNull]);
    expect(done(await call('CALL svc_decrypt_column($1, $2)', ['ramp', 'email']))).toEqual([1000, 3000, 7000, nonNull]);
    expect(await count('email IS DISTINCT FROM original', 'ramp')).toBe(0);
  });

  it('resumes after an interruption and encrypts every row exactly once', async () => {
    await fill('accounts', 10_000);
    const nonNull = 10_000 - Math.floor(10_000 / 17);
    const interrupted = await withClient(url, async (c) => {
      const pid = (await c.query('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      let settled = false;
      const running = c
        .query('CALL svc_encrypt_column($1, $2, $3, 100)', ['accounts', 'email', POLICIES.random])
        .then(
          () => undefined,
          (e: pg.DatabaseError) => e,
        )
        .finally(() => {
          settled = true;
        });
      // Interrupt as soon as the first chunk is committed.
      while (!settled && (await count(`email ~ ${CIPHERTEXT}`)) === 0) await new Promise((r) => setTimeout(r, 10));
      await withClient(url, (other) => other.query('SELECT pg_cancel_backend($1)', [pid]));
      return running;
    });
    expect(interrupted?.code).toBe('57014');
    const done = await count(`email ~ ${CIPHERTEXT}`);
    expect(done).toBeGreaterThan(0);
    expect(done).toBeLessThan(nonNull);
    expect(done % 100).toBe(0);

    const notices = await call('CALL svc_encrypt_column($1, $2, $3, 1000)', ['accounts', 'email', POLICIES.random]);
    expect(notices.at(-1)).toMatch(new RegExp(`^svc_encrypt_column: finished, ${nonNull - done} rows in`));
    expect(await count(`email ~ ${CIPHERTEXT}`)).toBe(nonNull);
    // Encrypted twice would decrypt to another ciphertext, not to the original.
    const wrong = await withClient(url, async (c) =>
      Number(
        (await c.query('SELECT count(*) AS n FROM accounts WHERE svc_decrypt(email) IS DISTINCT FROM original')).rows[0]?.n,
      ),
    );
    expect(wrong).toBe(0);
  });

  it('keeps the chunks already committed when a later chunk fails, and resumes once the cause is fixed', async () => {
    await fill('accounts', 600);
    const error = await withClient(url, async (c) => {
      await c.query("SET svc.batch_size = '50'");
      // A value the engine refuses (over its per-item size limit) makes the fifth chunk fail.
      await c.query("UPDATE accounts SET email = repeat('x', 5 * 1024 * 1024) WHERE id = 450");
      try {
        await c.query('CALL svc_encrypt_column($1, $2, $3, 100)', ['accounts', 'email', POLICIES.random]);
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(error.code).toBe('SV001');
    // The engine's reason, and CONTEXT names the procedure, not its internal statement or the bridge.
    expect(error.message).toMatch(/^svc_encrypt: data exceeds/);
    expect(error.where).toMatch(/^PL\/pgSQL function svc_encrypt_column\(regclass,name,text,integer,name\) line \d+ at RAISE$/);
    // Chunks are 100 rows still to encrypt, in key order: four of them precede the one holding id 450.
    expect(await count(`email ~ ${CIPHERTEXT}`)).toBe(400);
    await withClient(url, (c) => c.query("UPDATE accounts SET email = 'person450@example.com' WHERE id = 450"));
    await call('CALL svc_encrypt_column($1, $2, $3, 100)', ['accounts', 'email', POLICIES.random]);
    expect(await count(`email !~ ${CIPHERTEXT}`)).toBe(0);
  });

  it('leaves a row another session changed while its chunk was at the engine as that session wrote it', async () => {
    await fill('accounts', 300);
    const nonNull = 300 - Math.floor(300 / 17);
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query("UPDATE accounts SET email = 'changed@example.com' WHERE id = 5");
      // The walk reads id 5's old value (readers do not wait) and sends it; writing that chunk back waits
      // for this transaction, which then commits a new value.
      const running = call('CALL svc_encrypt_column($1, $2, $3, 100)', ['accounts', 'email', POLICIES.random]);
      // (Asked outside that transaction, which would keep seeing its first view of pg_stat_activity.)
      while (
        (await count("wait_event_type = 'Lock' AND query LIKE 'CALL svc_encrypt_column%'", 'pg_stat_activity')) === 0
      ) {
        await new Promise((r) => setTimeout(r, 10));
      }
      await other.query('COMMIT');
      const notices = await running;
      expect(notices).toContain(
        'svc_encrypt_column: 1 rows changed by another session while their chunk was at the engine were left as written; call the procedure again to do them',
      );
    } finally {
      await other.end();
    }
    const row5 = await withClient(url, async (c) => (await c.query('SELECT email FROM accounts WHERE id = 5')).rows[0]?.email);
    expect(row5).toBe('changed@example.com');
    expect(await count(`email ~ ${CIPHERTEXT}`)).toBe(nonNull - 1);
    await call('CALL svc_encrypt_column($1, $2, $3, 100)', ['accounts', 'email', POLICIES.random]);
    const back = await withClient(url, async (c) => (await c.query('SELECT svc_decrypt(email) AS v FROM accounts WHERE id = 5')).rows[0]?.v);
    expect(back).toBe('changed@example.com');
    expect(await count(`email !~ ${CIPHERTEXT}`)).toBe(0);
  });

  it('walks a table without a primary key by a named unique column, and says when it needs one', async () => {
    await withClient(url, (c) =>
      c.query(`DROP TABLE IF EXISTS loose; CREATE TABLE loose (code text NOT NULL UNIQUE, secret text);
        INSERT INTO loose SELECT 'k' || g, 's' || g FROM generate_series(1, 300) g;`),
    );
    const refused = await withClient(url, async (c) => {
      try {
        await c.query('CALL svc_encrypt_column($1, $2, $3)', ['loose', 'secret', POLICIES.deterministic]);
      } catch (e) {
        return e as pg.DatabaseError;
      }
      throw new Error('expected failure');
    });
    expect(refused.message).toBe('svc_encrypt_column: loose has no single-column primary key');
    expect(refused.hint).toContain('key_column');
    await call('CALL svc_encrypt_column($1, $2, $3, 64, key_column => $4)', ['loose', 'secret', POLICIES.deterministic, 'code']);
    expect(await count(`secret ~ ${CIPHERTEXT}`, 'loose')).toBe(300);
    await call('CALL svc_decrypt_column($1, $2, key_column => $3)', ['loose', 'secret', 'code']);
    expect(await count("secret = 's' || substr(code, 2)", 'loose')).toBe(300);
  });
});
