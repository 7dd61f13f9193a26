// Applies the committed SQL (sql/migrations in order, sql/uninstall.sql) to a database the way a
// migration runner does: each file as one statement through the pg client. Also runs psql -f for the
// tests that check the DBA's way.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';
import { REPO_ROOT, withClient } from './postgres-harness.js';

const run = promisify(execFile);

export const SQL_DIR = join(REPO_ROOT, 'sql');

export function migrationPaths(): string[] {
  const dir = join(SQL_DIR, 'migrations');
  return readdirSync(dir)
    .filter((f) => /^\d{4}-.*\.sql$/.test(f))
    .sort()
    .map((f) => join(dir, f));
}

/** Applies every migration (in order) on one connection; `settings` are SET first (e.g. svc.install_schema). */
export async function applyMigrations(url: string, settings: Record<string, string> = {}): Promise<void> {
  await withClient(url, async (client) => {
    await setAll(client, settings);
    for (const path of migrationPaths()) await client.query(readFileSync(path, 'utf8'));
  });
}

export async function uninstall(url: string, settings: Record<string, string> = {}): Promise<void> {
  await withClient(url, async (client) => {
    await setAll(client, settings);
    await client.query(readFileSync(join(SQL_DIR, 'uninstall.sql'), 'utf8'));
  });
}

/**
 * An ordinary application role (LOGIN, not a superuser) granted svc_user, created anew in the database at
 * `url`; returns the same URL logged in as that role.
 */
export async function createAppRole(url: string, role: string, password: string): Promise<string> {
  await withClient(url, async (c) => {
    await c.query(`DROP ROLE IF EXISTS ${role}`);
    await c.query(`CREATE ROLE ${role} LOGIN NOSUPERUSER PASSWORD '${password}'`);
    await c.query(`GRANT svc_user TO ${role}`);
  });
  const asRole = new URL(url);
  asRole.username = role;
  asRole.password = password;
  return asRole.toString();
}

export interface EngineAddress {
  /** The execution API, `http://host:port`. */
  readonly url: string;
  /** The operations API when it has its own listener; svc_engine_info() reads the runtime info there. */
  readonly opsUrl?: string;
  /** The operations API's tenant id, in the user mapping of the role that owns the functions. */
  readonly tenantId?: string;
  /** The PL/Python bridge's wire transport: the engine's wire endpoint (option wire_url) and its credentials. */
  readonly wire?: { readonly url: string; readonly user: string; readonly password: string };
}

/**
 * Points the PL/Python and plv8 bridges of a database at an engine the way docs/sql.md tells the DBA to:
 * (re)creates the foreign server svc_engine on svc_bridge_fdw, as the superuser of `url` (who applied the
 * migrations and so owns the functions), with a user mapping carrying the tenant id when given.
 */
export async function setEngineServer(url: string, address: EngineAddress): Promise<void> {
  await withClient(url, async (client) => {
    const options = [`url ${client.escapeLiteral(address.url)}`];
    if (address.opsUrl) options.push(`ops_url ${client.escapeLiteral(address.opsUrl)}`);
    if (address.wire) options.push(`wire_url ${client.escapeLiteral(address.wire.url)}`);
    const wrapper = await client.query("SELECT 1 FROM pg_catalog.pg_foreign_data_wrapper WHERE fdwname = 'svc_bridge_fdw'");
    if (wrapper.rowCount === 0) {
      // The migrations install the dblink bridge on a server without PL/Python or plv8: say so, rather
      // than let CREATE SERVER fail on the missing wrapper.
      const plpython = await client.query("SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = 'plpython3u'");
      throw new Error(
        'the PL/Python or plv8 bridge is not installed in this database (no foreign-data wrapper svc_bridge_fdw)' +
          (plpython.rowCount === 0
            ? ': this PostgreSQL server has no plpython3u, so the migrations installed the dblink bridge. Install PL/Python ' +
              '(Debian: apt-get install postgresql-plpython3-15, as .ci/run does) and run again.'
            : '; apply the migrations with svc.bridge unset or set to plpython3u first.'),
      );
    }
    await client.query('DROP SERVER IF EXISTS svc_engine CASCADE');
    await client.query(`CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (${options.join(', ')})`);
    const mapping = [
      ...(address.tenantId ? [`tenant_id ${client.escapeLiteral(address.tenantId)}`] : []),
      ...(address.wire ? [`user ${client.escapeLiteral(address.wire.user)}`, `password ${client.escapeLiteral(address.wire.password)}`] : []),
    ];
    if (mapping.length > 0) await client.query(`CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (${mapping.join(', ')})`);
  });
}

/**
 * Points the dblink bridge of a database at an engine's wire endpoint the way docs/sql.md §1a tells the
 * DBA to: the foreign server svc_engine on dblink_fdw and a user mapping for the superuser of `url` (who
 * applied the migrations and so owns the functions) with the endpoint's credentials.
 */
export async function setDblinkServer(url: string, endpoint: { port: number; password: string; user?: string }): Promise<void> {
  await withClient(url, async (client) => {
    await client.query('DROP SERVER IF EXISTS svc_engine CASCADE');
    await client.query(`CREATE SERVER svc_engine FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '127.0.0.1', port '${endpoint.port}', dbname 'svc')`);
    await client.query(
      `CREATE USER MAPPING FOR CURRENT_USER SERVER svc_engine OPTIONS (user ${client.escapeLiteral(endpoint.user ?? 'svc')}, password ${client.escapeLiteral(endpoint.password)})`,
    );
  });
}

async function setAll(client: pg.Client, settings: Record<string, string>): Promise<void> {
  for (const [name, value] of Object.entries(settings)) {
    await client.query('SELECT set_config($1, $2, false)', [name, value]);
  }
}

/** Runs a PostgreSQL client tool (psql, pg_dump) from binDir, or from PATH when binDir is undefined. */
export async function runTool(
  binDir: string | undefined,
  tool: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<string> {
  const file = binDir ? join(binDir, tool) : tool;
  const { stdout } = await run(file, args, { env: { ...process.env, ...env }, maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}
