// Opens the snapshot store on one of its two drivers and applies the drizzle-kit migrations before
// anything reads it: PGlite in the data directory (the embedded default, or in memory for tests) or
// PostgreSQL through DATABASE_URL with a small `pg` pool. Both get the same schema and migrations.
import { chmod, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type { Logger } from './logger.js';
import { type PGliteClient, startPglite } from './pglite-start.js';
import * as schema from './schema.js';

export type StoreDb = PgDatabase<PgQueryResultHKT, typeof schema>;
export type StoreDriver = 'pglite' | 'postgres';

export interface OpenedDb {
  readonly db: StoreDb;
  readonly driver: StoreDriver;
  /** Where the data lives, without credentials: for logs and /runtime/info. */
  readonly location: string;
  close(): Promise<void>;
}

export interface StoreLocation {
  /** postgres:// URL (DATABASE_URL); wins over pgliteDir. */
  readonly databaseUrl?: string;
  /** PGlite data directory; absent means an in-memory PGlite (tests). */
  readonly pgliteDir?: string;
  /** Per query limit on PostgreSQL, so a vanished server fails a sync quickly instead of hanging it. */
  readonly queryTimeoutMs?: number;
  /** PGlite already started on pgliteDir (startPglite). */
  readonly started?: Promise<PGliteClient>;
}

const MIGRATIONS = {
  migrationsFolder: fileURLToPath(new URL('../../drizzle/migrations', import.meta.url)),
  migrationsSchema: 'svc_engine',
  migrationsTable: '__drizzle_migrations',
};

/** Same key for every engine sharing a database: migrations run one engine at a time. */
const MIGRATION_LOCK = 0x5356_4301;

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = '';
    parsed.username = parsed.username ? '***' : '';
    return parsed.toString();
  } catch {
    return 'postgres (unparsable URL)';
  }
}

/**
 * Makes the embedded store private to the engine's user: directories 0700, files 0600. The process
 * umask covers what is created later; this covers what PGlite chmods itself (0640) and older stores.
 */
async function tighten(dir: string): Promise<number> {
  // A file the engine's user does not own cannot be changed: counted and reported, not fatal.
  const set = (path: string, mode: number) => chmod(path, mode).then(() => 0, () => 1);
  const own = await set(dir, 0o700);
  // A store holds about a thousand files: one chmod after the other took 100-250 ms of a warm start,
  // all at once (libuv's thread pool) a fraction of that.
  const entries = await readdir(dir, { withFileTypes: true });
  const counts = await Promise.all(
    entries.map((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return tighten(path);
      return entry.isFile() ? set(path, 0o600) : 0;
    }),
  );
  return counts.reduce((sum, n) => sum + n, own);
}

async function openPglite(dir: string | undefined, log: Logger, started?: Promise<PGliteClient>): Promise<OpenedDb> {
  const { drizzle } = await import('drizzle-orm/pglite');
  const { migrate } = await import('drizzle-orm/pglite/migrator');
  let client: PGliteClient;
  try {
    client = await (started ?? startPglite(dir));
    await client.waitReady;
  } catch (error) {
    // A damaged data directory makes PGlite's WebAssembly abort ("Aborted(). Build with -sASSERTIONS …"),
    // which says nothing about where or what: name the directory and the way back instead.
    const detail = (error as Error).message ?? String(error);
    if (dir !== undefined && /Aborted|RuntimeError|unreachable|memory access out of bounds/i.test(detail)) {
      throw new Error(
        `the embedded store directory ${dir} is damaged (PGlite could not open it). Ways back: stop the engine and ` +
          'restore that directory from a backup; or move it aside and start again, so the engine resyncs from the hub ' +
          '(or SVC_BOOTSTRAP_FILE) into a new store. See docs/operations.md#damaged-store.',
        { cause: error },
      );
    }
    throw error;
  }
  const db = drizzle(client, { schema });
  // The files are made private while the migrations run; both are done before anything is read.
  const tightening = dir === undefined ? Promise.resolve(0) : tighten(dir);
  tightening.catch(() => undefined); // reported below, unless a failed migration is reported first
  await migrate(db, MIGRATIONS);
  const untightened = await tightening;
  if (untightened > 0) {
    log.warn({ dir, files: untightened }, 'could not make some store files private (0600/0700): check their owner');
  }
  return { db, driver: 'pglite', location: dir ?? 'memory', close: () => client.close() };
}

async function openPostgres(url: string, queryTimeoutMs: number, log: Logger): Promise<OpenedDb> {
  const { default: pg } = await import('pg');
  const { drizzle } = await import('drizzle-orm/node-postgres');
  const { migrate } = await import('drizzle-orm/node-postgres/migrator');
  const pool = new pg.Pool({
    connectionString: url,
    max: 4,
    connectionTimeoutMillis: queryTimeoutMs,
    query_timeout: queryTimeoutMs,
    application_name: 'svc-engine',
  });
  // A client losing its server emits 'error' (on the pool while idle, on the client while checked out
  // between queries); without listeners the process would crash. The next query reports the outage.
  pool.on('error', (error) => log.warn({ err: error.message }, 'snapshot store connection lost'));
  pool.on('connect', (client) => {
    client.on('error', (error) => log.warn({ err: error.message }, 'snapshot store connection lost'));
  });
  const db = drizzle(pool, { schema });
  const lock = await pool.connect();
  try {
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await migrate(db, MIGRATIONS);
  } finally {
    await lock.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    lock.release();
  }
  return { db, driver: 'postgres', location: redact(url), close: () => pool.end() };
}

export async function openDb(location: StoreLocation, log: Logger): Promise<OpenedDb> {
  try {
    return location.databaseUrl
      ? await openPostgres(location.databaseUrl, location.queryTimeoutMs ?? 5000, log)
      : await openPglite(location.pgliteDir, log, location.started);
  } catch (error) {
    const where = location.databaseUrl
      ? `DATABASE_URL (${redact(location.databaseUrl)})`
      : `PGlite (${location.pgliteDir ?? 'memory'})`;
    // drizzle wraps driver errors ("Failed query: …"); the driver's own message says what went wrong.
    const cause = (error as { cause?: { message?: string } }).cause?.message;
    const detail = cause ? `${(error as Error).message.split('\n')[0]}: ${cause}` : (error as Error).message;
    throw new Error(`cannot open the snapshot store at ${where}: ${detail}`, { cause: error });
  }
}
