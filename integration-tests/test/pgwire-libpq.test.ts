// The engine's PostgreSQL wire endpoint spoken to by libpq itself: real psql, and a real PostgreSQL 15
// calling it through dblink as an ordinary (non-superuser) role whose password sits in a user mapping
// of a dblink_fdw foreign server. The engine runs as a real process outside dev mode, with the endpoint
// configured through SVC_PG_* as an operator would.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ENGINE_MAIN, type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, findPostgresBinDir, freePort, withClient } from '../src/postgres-harness.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const run = promisify(execFile);
const adminUrl = inject('databaseUrl');
const DB = 'svc_pgwire_it';
const ROLE = 'svc_pgwire_app';
const PASSWORD = 'wire-it-password-9';

let engine: RunningEngine;
let url: string;
let appUrl: string;

function b64(value: string): string {
  return value === '' ? '-' : Buffer.from(value, 'utf8').toString('base64');
}

beforeAll(async () => {
  const pgPort = await freePort();
  engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: PASSWORD },
  });
  url = await createDatabase(adminUrl, DB);
  await withClient(url, async (c) => {
    await c.query('CREATE EXTENSION dblink');
    await c.query(`DROP ROLE IF EXISTS ${ROLE}`);
    await c.query(`CREATE ROLE ${ROLE} LOGIN NOSUPERUSER`);
    await c.query(`CREATE SERVER svc_engine FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '${pgPort}', dbname 'svc')`);
    await c.query(`CREATE USER MAPPING FOR ${ROLE} SERVER svc_engine OPTIONS (user 'svc', password '${PASSWORD}')`);
    await c.query(`GRANT USAGE ON FOREIGN SERVER svc_engine TO ${ROLE}`);
  });
  const asRole = new URL(url);
  asRole.username = ROLE;
  appUrl = asRole.toString();
});

afterAll(async () => {
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
  await withClient(adminUrl, (c) => c.query(`DROP ROLE IF EXISTS ${ROLE}`)).catch(() => {});
});

describe('configuration', () => {
  it('refuses to start with SVC_PG_PORT set and no password outside dev mode', async () => {
    const env: Record<string, string> = { PATH: process.env.PATH ?? '', SVC_PG_PORT: String(await freePort()), SVC_PORT: '0' };
    const failed = await run(process.execPath, [ENGINE_MAIN], { env }).catch((e: { code: number; stderr: string }) => e);
    expect((failed as { code: number }).code).toBe(2);
    expect((failed as { stderr: string }).stderr).toContain(
      'SVC_PG_PORT is set: SVC_PG_PASSWORD or SVC_PG_PASSWORD_FILE is required (there is no default password)',
    );
  });
});

describe('psql', () => {
  it('authenticates with SCRAM-SHA-256 and runs commands', async () => {
    const binDir = findPostgresBinDir();
    expect(binDir, 'psql from PostgreSQL 15 binaries').toBeDefined();
    const psql = join(binDir as string, 'psql');
    const conn = `host=127.0.0.1 port=${engine.pgPort} user=svc dbname=svc sslmode=prefer`;
    const env = { ...process.env, PGPASSWORD: PASSWORD, PGCONNECT_TIMEOUT: '10' };
    const value = 'it\'s "quoted" \\ $$ ; 🎉';
    const { stdout } = await run(psql, [conn, '-XAt', '-v', 'ON_ERROR_STOP=1', '-c', `svc_encrypt ${b64(POLICIES.random)} ${b64(value)}`], { env });
    const ciphertext = stdout.trim();
    expect(ciphertext).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
    const back = await run(psql, [conn, '-XAt', '-c', `svc_decrypt ${b64(ciphertext)}`], { env });
    expect(back.stdout).toBe(`${value}\n`);

    const wrong = await run(psql, [conn, '-XAt', '-c', 'svc_health'], { env: { ...env, PGPASSWORD: 'nope' } }).catch((e: { stderr: string }) => e);
    expect((wrong as { stderr: string }).stderr).toContain('password authentication failed for user "svc"');

    const unknown = await run(psql, [conn, '-XAt', '-c', 'SELECT 1'], { env }).catch((e: { stderr: string }) => e);
    expect((unknown as { stderr: string }).stderr).toContain('unknown command; see docs/pgwire.md');
  });
});

describe('dblink from PostgreSQL 15 as an ordinary role', () => {
  async function asApp<T>(use: (c: pg.Client) => Promise<T>): Promise<T> {
    return withClient(appUrl, use);
  }

  it('encrypts and decrypts through a named connection on the foreign server', async () => {
    await asApp(async (c) => {
      expect((await c.query('SELECT rolsuper FROM pg_roles WHERE rolname = current_user')).rows[0].rolsuper).toBe(false);
      await c.query('SELECT dblink_connect(\'svc\', \'svc_engine\')');
      const value = "O'Brien; DROP TABLE x; -- $$ \\ ünïcödé 𝄞";
      const enc = await c.query(
        `SELECT data FROM dblink('svc', 'svc_encrypt ' || encode(convert_to($1, 'UTF8'), 'base64') || ' '
                                         || encode(convert_to($2, 'UTF8'), 'base64')) AS t(data text)`,
        [POLICIES.random, value],
      );
      const ciphertext = enc.rows[0].data as string;
      expect(ciphertext).toMatch(new RegExp(`^hub:${POLICIES.random}:`));
      const dec = await c.query(
        'SELECT data FROM dblink(\'svc\', \'svc_decrypt \' || encode(convert_to($1, \'UTF8\'), \'base64\')) AS t(data text)',
        [ciphertext],
      );
      expect(dec.rows[0].data).toBe(value);

      // PostgreSQL's base64 breaks lines every 76 characters; the endpoint ignores the breaks.
      const long = 'x'.repeat(500);
      const many = await c.query(
        `SELECT i, data FROM dblink('svc', 'svc_encrypt_many ' || encode(convert_to($1, 'UTF8'), 'base64') || ' '
                                           || encode(convert_to($2, 'UTF8'), 'base64') || ' -') AS t(i int, data text) ORDER BY i`,
        [POLICIES.random, long],
      );
      expect(many.rows.map((r) => r.i)).toEqual([1, 2]);
      const back = await c.query(
        `SELECT i, data FROM dblink('svc', 'svc_decrypt_many ' || encode(convert_to($1, 'UTF8'), 'base64') || ' '
                                           || encode(convert_to($2, 'UTF8'), 'base64')) AS t(i int, data text) ORDER BY i`,
        [many.rows[0].data, many.rows[1].data],
      );
      expect(back.rows).toEqual([
        { i: 1, data: long },
        { i: 2, data: '' },
      ]);
      await c.query('SELECT dblink_disconnect(\'svc\')');
    });
  });

  it('surfaces the engine errors with their SQLSTATE through dblink', async () => {
    await asApp(async (c) => {
      await c.query('SELECT dblink_connect(\'svc\', \'svc_engine\')');
      // Without fail_on_error: no rows, and the remote message is kept for dblink_error_message.
      const quiet = await c.query('SELECT * FROM dblink(\'svc\', \'svc_encrypt \' || encode(\'NOPE\', \'base64\') || \' -\', false) AS t(data text)');
      expect(quiet.rows).toEqual([]);
      const remote = await c.query('SELECT dblink_error_message(\'svc\') AS m');
      expect(remote.rows[0].m).toContain('svc_encrypt: policy not found: NOPE');
      // With fail_on_error (the default) the remote error is raised locally.
      const error = await c
        .query('SELECT * FROM dblink(\'svc\', \'svc_encrypt \' || encode(\'NOPE\', \'base64\') || \' -\') AS t(data text)')
        .catch((e: pg.DatabaseError) => e);
      expect((error as pg.DatabaseError).message).toContain('svc_encrypt: policy not found: NOPE');
      // dblink re-raises the remote SQLSTATE.
      expect((error as pg.DatabaseError).code).toBe('SV001');
    });
  });

  it('refuses a wrong password in the user mapping with a clear error', async () => {
    await withClient(url, (c) =>
      c.query(`ALTER USER MAPPING FOR ${ROLE} SERVER svc_engine OPTIONS (SET password 'wrong-password')`),
    );
    try {
      const error = await asApp((c) => c.query('SELECT dblink_connect(\'bad\', \'svc_engine\')').catch((e: pg.DatabaseError) => e));
      expect((error as pg.DatabaseError).message).toContain('could not establish connection');
      expect((error as pg.DatabaseError).detail).toContain('password authentication failed for user "svc"');
    } finally {
      await withClient(url, (c) =>
        c.query(`ALTER USER MAPPING FOR ${ROLE} SERVER svc_engine OPTIONS (SET password '${PASSWORD}')`),
      );
    }
  });
});

