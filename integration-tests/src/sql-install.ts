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
