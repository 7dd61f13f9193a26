// The engine address of the PL/Python bridge belongs to the DBA (docs/sql.md §2): it is the foreign server
// svc_engine, the public functions are SECURITY DEFINER and read it there, and the internal functions that
// take it as an argument are executable by their owner alone. Everything the application does runs as an
// ordinary LOGIN role (NOSUPERUSER, granted svc_user) against a real PostgreSQL and a real engine, while a
// TCP listener standing in for another address must receive nothing.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { IMPLS } from '../../udf/src/build/sql-surface.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { createDatabase, dropDatabase, sqlFailure, withClient } from '../src/postgres-harness.js';
import { applyMigrations, migrationPaths, setEngineServer } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';
import { startTrap, type TrapListener } from '../src/trap-listener.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_address_it';
const APP = 'svc_address_it_app';
const TENANT = 'svc-address-it-tenant';
const CIPHERTEXT = /^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$/;

let url: string;
let appUrl: string;
let engine: RunningEngine;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- result rows are whatever the SQL selects; the assertions check them.
type Row = Record<string, any>;

const asAdmin = <T>(use: (c: pg.Client) => Promise<T>) => withClient(url, use);
const asApp = <T>(use: (c: pg.Client) => Promise<T>) => withClient(appUrl, use);

async function roundTrip(c: pg.Client, value: string): Promise<void> {
  const enc = (await c.query<Row>('SELECT svc_encrypt($1, $2) AS c', [value, POLICIES.random])).rows[0]?.c as string;
  expect(enc).toMatch(CIPHERTEXT);
  expect((await c.query<Row>('SELECT svc_decrypt($1) AS p', [enc])).rows[0]?.p).toBe(value);
}

beforeAll(async () => {
  engine = await startEngine({ bootstrap: testBootstrap() });
  // An identity, so the operations API answers GET /runtime/info for the tenant in the user mapping.
  const registered = await fetch(`${engine.opsUrl}/engine/api/v1/runtime/identity`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ hubUrl: 'http://127.0.0.1:9', tenantId: TENANT }),
  });
  expect(registered.status).toBe(200);
  url = await createDatabase(adminUrl, DB);
  await applyMigrations(url);
  await setEngineServer(url, { url: engine.url, opsUrl: engine.opsUrl, tenantId: TENANT });
  await asAdmin(async (c) => {
    await c.query(`DROP ROLE IF EXISTS ${APP}`);
    await c.query(`CREATE ROLE ${APP} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB`);
    await c.query(`GRANT svc_user TO ${APP}`);
  });
  const u = new URL(url);
  u.username = APP;
  appUrl = u.toString();
});

afterAll(async () => {
  await engine?.dispose();
  await dropDatabase(adminUrl, DB);
  await withClient(adminUrl, (c) => c.query(`DROP ROLE IF EXISTS ${APP}`));
});

describe('the engine address belongs to the DBA', () => {
  it('an ordinary role cannot make the database send values anywhere else', async () => {
    const trap: TrapListener = await startTrap();
    const elsewhere = `http://127.0.0.1:${trap.port}`;
    try {
      await asApp(async (c) => {
        expect((await c.query<Row>('SELECT rolsuper FROM pg_roles WHERE rolname = current_user')).rows[0]?.rolsuper).toBe(false);
        // A setting: nothing reads svc.engine_url any more.
        await c.query(`SET svc.engine_url = '${elsewhere}'`);
        await roundTrip(c, 'secret-1');
        // PostgreSQL 15 refuses ALTER ROLE … SET of a placeholder setting to a non-superuser; were it
        // allowed, the next session below would still reach only the engine.
        await c.query(`ALTER ROLE ${APP} SET svc.engine_url = '${elsewhere}'`).catch((e: pg.DatabaseError) => {
          expect(e.code).toBe('42501');
        });
      });
      await asApp(async (c) => {
        await roundTrip(c, 'secret-2');
        // Every internal function, called directly with the other address in its cfg argument.
        for (const f of IMPLS) {
          const types = f.identity.split(',').map((t) => t.trim());
          const args = types.map((t, i) =>
            i === types.length - 1 ? `ARRAY['${elsewhere}', '5000', '1000', NULL, '${elsewhere}', 'svc_bridge_fdw']` : `NULL::${t}`,
          );
          const denied = await sqlFailure(c.query(`SELECT ${f.name}(${args.join(', ')})`));
          expect(denied.code, f.name).toBe('42501');
        }
        // The server: only its owner may change it; no other server, wrapper, mapping or function of its own.
        for (const statement of [
          `ALTER SERVER svc_engine OPTIONS (SET url '${elsewhere}')`,
          'DROP SERVER svc_engine',
          `CREATE SERVER evil FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url '${elsewhere}')`,
          'CREATE FOREIGN DATA WRAPPER evil_fdw',
          "CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (tenant_id 'x')",
          `CREATE FUNCTION pg_temp.evil() RETURNS text LANGUAGE plpython3u AS $$ return '${elsewhere}' $$`,
          'GRANT USAGE ON FOREIGN DATA WRAPPER svc_bridge_fdw TO PUBLIC',
        ]) {
          const denied = await sqlFailure(c.query(statement));
          expect(denied.code, statement).toBe('42501');
        }
        // Shadowing catalog names with temporary objects changes nothing (pinned search_path).
        await c.query('CREATE TEMP TABLE pg_foreign_server (srvname name, srvoptions text[], srvfdw oid)');
        await c.query(`INSERT INTO pg_temp.pg_foreign_server VALUES ('svc_engine', ARRAY['url=${elsewhere}'], 0)`);
        await c.query('CREATE FUNCTION pg_temp.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT NULL::text $$');
        await roundTrip(c, 'secret-3');
        await c.query('SET svc.batch_size = \'2\'');
        const many = ['a', 'b', 'c', null, 'd'];
        const back = (await c.query<Row>('SELECT svc_decrypt(svc_encrypt($1::text[], $2)) AS v', [many, POLICIES.random])).rows[0]?.v;
        expect(back).toEqual(many);
      });
    } finally {
      await asAdmin((c) => c.query(`ALTER ROLE ${APP} RESET svc.engine_url`));
      await trap.close();
    }
    expect(trap.connections()).toBe(0);
    expect(trap.bytes()).toBe(0);
  });

  it('the tenant id stays with the owner; svc_engine_info reads the runtime info on the operations listener', async () => {
    await asApp(async (c) => {
      const mapping = (await c.query<Row>("SELECT umoptions FROM pg_user_mappings WHERE srvname = 'svc_engine'")).rows;
      expect(mapping).toEqual([{ umoptions: null }]);
      const info = (await c.query<Row>('SELECT svc_engine_info() AS i')).rows[0]?.i;
      expect(info).toMatchObject({
        engineServer: 'svc_engine',
        engineUrl: engine.url,
        opsUrl: engine.opsUrl,
        bridge: 'plpython3u',
        health: { status: 'UP' },
      });
      expect(info.runtime).not.toBeNull();
      expect(JSON.stringify(info)).not.toContain(TENANT);
    });
  });
});

describe('upgrading an install that read svc.engine_url', () => {
  it('re-applying the migration takes EXECUTE on the internal functions from svc_user and names the obsolete setting', async () => {
    const signature = (f: (typeof IMPLS)[number]) => `${f.name}(${f.identity})`;
    const notices: string[] = [];
    await asAdmin(async (c) => {
      // What earlier installs left: the internal functions granted to svc_user, the address in a setting.
      for (const f of IMPLS) await c.query(`GRANT EXECUTE ON FUNCTION ${signature(f)} TO svc_user`);
      await c.query(`ALTER DATABASE ${DB} SET svc.engine_url = 'http://127.0.0.1:1'`);
    });
    try {
      await asAdmin(async (c) => {
        c.on('notice', (n) => notices.push(n.message ?? ''));
        for (const path of migrationPaths()) await c.query(readFileSync(path, 'utf8'));
      });
      await asAdmin(async (c) => {
        for (const f of IMPLS) {
          const granted = (await c.query<Row>('SELECT has_function_privilege($1, $2, \'EXECUTE\') AS g', ['svc_user', signature(f)])).rows[0]?.g;
          expect(granted, f.name).toBe(false);
        }
      });
      expect(notices.some((n) => n.includes('svc.engine_url is no longer read'))).toBe(true);
      await asApp((c) => roundTrip(c, 'after the upgrade'));
    } finally {
      await asAdmin((c) => c.query(`ALTER DATABASE ${DB} RESET svc.engine_url`));
    }
  });
});

describe('a missing or wrong server', () => {
  /** Runs `change` as the DBA in a transaction that is rolled back, and returns what svc_encrypt raised. */
  async function withServer(change: string): Promise<pg.DatabaseError> {
    return asAdmin(async (c) => {
      await c.query('BEGIN');
      try {
        await c.query(change);
        return await sqlFailure(c.query("SELECT svc_encrypt('x', 'PII_EMAIL')"));
      } finally {
        await c.query('ROLLBACK');
      }
    });
  }

  it('raises SV003 with a hint naming what to create', async () => {
    const missing = await withServer('DROP SERVER svc_engine CASCADE');
    expect(missing).toMatchObject({ code: 'SV003' });
    expect(missing.message).toContain('the foreign server svc_engine that holds the engine address does not exist');
    expect(missing.hint).toContain('CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw');
    // The message and CONTEXT are the bridge's, cleaned: no Python class prefix, no traceback, no internals.
    expect(missing.message).not.toContain('plpy');
    expect(missing.where).toMatch(/^PL\/pgSQL function public\.svc_encrypt\(text,text\) line \d+ at RAISE$/);

    const other = await withServer(
      "DROP SERVER svc_engine CASCADE; CREATE FOREIGN DATA WRAPPER svc_other_fdw; CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_other_fdw OPTIONS (host 'x')",
    );
    expect(other.code).toBe('SV003');
    expect(other.message).toContain('the foreign server svc_engine is on the foreign-data wrapper svc_other_fdw, not svc_bridge_fdw');

    const noUrl = await withServer('ALTER SERVER svc_engine OPTIONS (DROP url)');
    expect(noUrl.code).toBe('SV003');
    expect(noUrl.message).toContain('the foreign server svc_engine has no option url');
    expect(noUrl.hint).toContain('ALTER SERVER svc_engine OPTIONS (ADD url');

    const badUrl = await withServer("ALTER SERVER svc_engine OPTIONS (SET url 'localhost:8080')");
    expect(badUrl.code).toBe('SV003');
    expect(badUrl.message).toContain('option url of the foreign server svc_engine must be an http:// or https:// URL');

    const down = await withServer("ALTER SERVER svc_engine OPTIONS (SET url 'http://127.0.0.1:1')");
    expect(down.code).toBe('SV002');
    expect(down.message).toContain('engine at http://127.0.0.1:1 is unreachable');
  });
});
