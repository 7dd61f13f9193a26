// Installing like a DBA: the committed sql/ is what udf/ generates; the migrations apply with psql -f,
// with a migration runner (drizzle's migrator) and as CREATE EXTENSION; applying twice changes nothing;
// uninstall leaves the schema as it was (compared with pg_dump --schema-only).
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sqlArtifacts } from '../../udf/src/build/artifacts.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { clientBinDir, createDatabase, dropDatabase, withClient } from '../src/postgres-harness.js';
import { applyMigrations, migrationPaths, runTool, setEngineServer, SQL_DIR, uninstall } from '../src/sql-install.js';

const adminUrl = inject('databaseUrl');
const source = inject('databaseSource');
const DBS = ['svc_install_it', 'svc_install_schema_it', 'svc_install_drizzle_it', 'svc_install_ext_it', 'svc_install_mig_it'];

let binDir: string | undefined;

function listFiles(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listFiles(join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`],
  );
}

/** A fresh database with the bridge language already present, so dumps compare only the bridge's objects. */
async function freshDatabase(name: string): Promise<string> {
  const url = await createDatabase(adminUrl, name);
  await withClient(url, (c) => c.query('CREATE EXTENSION plpython3u'));
  return url;
}

async function dump(url: string): Promise<string> {
  const text = await runTool(binDir, 'pg_dump', ['--schema-only', '--no-owner', '-d', url]);
  // Recent pg_dump releases wrap the script in \restrict <random key> ... \unrestrict <key>.
  return text.replace(/^\\(un)?restrict .*$/gm, '');
}

async function bridgeObjects(url: string, schema: string): Promise<string[]> {
  return withClient(url, async (c) =>
    (
      await c.query<{ sig: string }>(
        `SELECT p.oid::regprocedure::text || ' ' || p.prokind::text || ' ' || l.lanname || ' ' || p.proparallel::text || ' ' || p.provolatile::text
                || ' ' || coalesce(array_to_string(p.proconfig, ','), '') AS sig
           FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
          WHERE p.pronamespace = $1::regnamespace ORDER BY 1`,
        [schema],
      )
    ).rows.map((r) => r.sig.replace(`${schema}.`, '')),
  );
}

beforeAll(async () => {
  binDir = await clientBinDir(adminUrl);
});

afterAll(async () => {
  for (const db of DBS) await dropDatabase(adminUrl, db);
});

describe('the committed SQL', () => {
  it('is exactly what the udf generator produces', () => {
    const generated = sqlArtifacts();
    const committed = listFiles(SQL_DIR).sort();
    expect(committed).toEqual(Object.keys(generated).sort());
    for (const [path, content] of Object.entries(generated)) {
      expect(readFileSync(join(SQL_DIR, path), 'utf8'), `sql/${path} differs: run npm run sql -w udf`).toBe(content);
    }
  });

  it('makes each migration a single statement, so it is one transaction under any runner', () => {
    for (const path of migrationPaths()) {
      const code = readFileSync(path, 'utf8')
        .split('\n')
        .filter((line) => !line.startsWith('--'))
        .join('\n')
        .trim();
      expect(code.startsWith('DO $svc_install$'), basename(path)).toBe(true);
      expect(code.endsWith('$svc_install$;'), basename(path)).toBe(true);
      expect(code.split('$svc_install$').length, basename(path)).toBe(3);
    }
  });
});

describe('migrations', () => {
  it('apply with psql -f, re-apply without change, uninstall to the original schema, and re-apply', async () => {
    const url = await freshDatabase('svc_install_it');
    const before = await dump(url);
    for (const path of migrationPaths()) {
      await runTool(binDir, 'psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-f', path]);
    }
    const installed = await dump(url);
    expect(installed).toContain('CREATE FUNCTION public.svc_encrypt(data text, policy_code text) RETURNS text');
    expect(installed).toContain('GRANT ALL ON FUNCTION public.svc_encrypt(data text, policy_code text) TO svc_user');
    expect(installed).toContain('REVOKE ALL ON FUNCTION public.svc_encrypt(data text, policy_code text) FROM PUBLIC');
    expect(installed).toContain('CREATE FOREIGN DATA WRAPPER svc_bridge_fdw;');
    expect(installed).toMatch(/CREATE FUNCTION public\.svc_encrypt\(data text, policy_code text\) RETURNS text\n[^;]*SECURITY DEFINER/);
    // The internal functions take the address as an argument: nobody but their owner may execute them.
    expect(installed).toContain('REVOKE ALL ON FUNCTION public.svc__encrypt(data text, policy_code text, cfg text[]) FROM PUBLIC');
    expect(installed).not.toMatch(/GRANT ALL ON FUNCTION public\.svc__\w+\(.*\) TO svc_user/);

    await applyMigrations(url);
    expect(await dump(url)).toBe(installed);

    await uninstall(url);
    expect(await dump(url)).toBe(before);

    await applyMigrations(url);
    expect(await dump(url)).toBe(installed);
  });

  it('install into a chosen schema, grant its usage, and uninstall removes the schema they created', async () => {
    const url = await freshDatabase('svc_install_schema_it');
    const before = await dump(url);
    const [first, ...later] = migrationPaths();
    // The setting names the schema for the first migration; the later ones, a re-apply and the uninstall
    // find the install there, each in a session of its own without the setting.
    await withClient(url, async (c) => {
      await c.query("SET svc.install_schema = 'crypto'");
      await c.query(readFileSync(first as string, 'utf8'));
    });
    for (const path of [...later, first]) await withClient(url, (c) => c.query(readFileSync(path as string, 'utf8')));
    const objects = await bridgeObjects(url, 'crypto');
    expect(objects).toContain('svc_encrypt(text,text) f plpgsql u v search_path=pg_catalog, pg_temp');
    expect(objects).toContain('svc__encrypt(text,text,text[]) f plpython3u u v search_path=pg_catalog, pg_temp');
    expect(objects).toContain('svc_encrypt_column(regclass,name,text,integer,name) p plpgsql u v ');
    expect(objects).toContain('svc_rewrap_column(regclass,name,integer,name,boolean) p plpgsql u v ');
    expect(await bridgeObjects(url, 'public')).toEqual([]);
    const usage = await withClient(url, async (c) =>
      (await c.query("SELECT has_schema_privilege('svc_user', 'crypto', 'USAGE') AS u")).rows[0]?.u,
    );
    expect(usage).toBe(true);
    // A setting an older install read (the address is the foreign server's now) does not outlive the uninstall.
    await withClient(url, (c) => c.query("ALTER DATABASE svc_install_schema_it SET svc.engine_url = 'http://127.0.0.1:1'"));
    const notices = await withClient(url, async (c) => {
      const seen: string[] = [];
      c.on('notice', (n) => seen.push(n.message ?? ''));
      await c.query(readFileSync(join(SQL_DIR, 'uninstall.sql'), 'utf8'));
      return seen;
    });
    expect(notices).toContain('svc bridge: database setting svc.engine_url removed (nothing reads it since the foreign server svc_engine)');
    const left = await withClient(url, async (c) =>
      (await c.query('SELECT count(*)::int AS n FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())')).rows[0]?.n,
    );
    expect(left).toBe(0);
    expect(await dump(url)).toBe(before);
  });

  it('refuse a bridge the server does not offer, or an unknown one, with SV003', async () => {
    const url = await freshDatabase('svc_install_mig_it');
    const failure = async (bridge: string) =>
      withClient(url, async (c) => {
        await c.query('SELECT set_config($1, $2, false)', ['svc.bridge', bridge]);
        try {
          await c.query(readFileSync(migrationPaths()[0] as string, 'utf8'));
        } catch (e) {
          return e as pg.DatabaseError;
        }
        throw new Error('expected failure');
      });
    const unknown = await failure('plperl');
    expect(unknown.code).toBe('SV003');
    expect(unknown.message).toContain('svc.bridge must be plpython3u, plv8 or dblink, got "plperl"');
    const plv8 = await withClient(url, async (c) =>
      (await c.query("SELECT count(*)::int AS n FROM pg_available_extensions WHERE name IN ('plv8', 'http')")).rows[0]?.n,
    );
    if (plv8 !== 2) {
      const missing = await failure('plv8');
      expect(missing.code).toBe('SV003');
      expect(missing.message).toContain('needs the plv8 and http extensions');
    }
    expect(await bridgeObjects(url, 'public')).toEqual([]);
  });

  it('apply through a migration runner (drizzle-orm migrate), as docs/sql.md describes', async () => {
    const url = await freshDatabase('svc_install_drizzle_it');
    const folder = mkdtempSync(join(tmpdir(), 'svc-drizzle-'));
    const entries = migrationPaths().map((path, idx) => {
      const tag = basename(path, '.sql');
      copyFileSync(path, join(folder, `${tag}.sql`));
      return { idx, version: '7', when: 1_700_000_000_000 + idx, tag, breakpoints: true };
    });
    mkdirSync(join(folder, 'meta'));
    writeFileSync(join(folder, 'meta', '_journal.json'), JSON.stringify({ version: '7', dialect: 'postgresql', entries }));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await migrate(drizzle(client), { migrationsFolder: folder });
      await migrate(drizzle(client), { migrationsFolder: folder });
    } finally {
      await client.end();
      rmSync(folder, { recursive: true, force: true });
    }
    const objects = await bridgeObjects(url, 'public');
    expect(objects.length).toBeGreaterThan(10);
    const reference = await createDatabase(adminUrl, 'svc_install_it');
    await withClient(reference, (c) => c.query('CREATE EXTENSION plpython3u'));
    await applyMigrations(reference);
    expect(objects).toEqual(await bridgeObjects(reference, 'public'));
  });
});

describe('the extension', () => {
  let engine: RunningEngine | undefined;
  afterAll(() => engine?.dispose());

  /** Our own throwaway cluster: install the extension files into its share directory, like `make install`. */
  async function installExtensionFiles(): Promise<void> {
    if (source === 'local') {
      const share = (await runTool(binDir, 'pg_config', ['--sharedir'])).trim();
      try {
        for (const file of readdirSync(join(SQL_DIR, 'extension'))) {
          copyFileSync(join(SQL_DIR, 'extension', file), join(share, 'extension', file));
        }
      } catch (error) {
        throw new Error(`cannot install the extension files into ${share}/extension (run the tests as root, or set TEST_DATABASE_URL to a server that has them): ${(error as Error).message}`);
      }
    }
  }

  it('creates the same objects with CREATE EXTENSION, works, and DROP EXTENSION leaves the schema as it was', async () => {
    await installExtensionFiles();
    const url = await freshDatabase('svc_install_ext_it');
    const available = await withClient(url, async (c) =>
      (await c.query("SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'svc_bridge'")).rows[0]?.n,
    );
    expect(available, 'copy sql/extension/* into the server\'s $(pg_config --sharedir)/extension').toBe(1);

    const before = await dump(url);
    await withClient(url, (c) => c.query('CREATE SCHEMA svc_ext; CREATE EXTENSION svc_bridge SCHEMA svc_ext'));
    const reference = await createDatabase(adminUrl, 'svc_install_it');
    await withClient(reference, (c) => c.query('CREATE EXTENSION plpython3u'));
    await applyMigrations(reference, { 'svc.install_schema': 'svc_ext' });
    expect(await bridgeObjects(url, 'svc_ext')).toEqual(await bridgeObjects(reference, 'svc_ext'));

    engine = await startEngine();
    await setEngineServer(url, { url: engine.url });
    const back = await withClient(url, async (c) => {
      const enc = (await c.query("SELECT svc_ext.svc_encrypt('via extension', 'DEMO_RANDOM') AS c")).rows[0]?.c;
      return (await c.query('SELECT svc_ext.svc_decrypt($1) AS p', [enc])).rows[0]?.p;
    });
    expect(back).toBe('via extension');

    // The server is the DBA's and depends on the extension's foreign-data wrapper: it goes first.
    await withClient(url, (c) => c.query('DROP SERVER svc_engine; DROP EXTENSION svc_bridge; DROP SCHEMA svc_ext'));
    expect(await dump(url)).toBe(before);
  });

  it('upgrades from 1.0 with ALTER EXTENSION UPDATE to what a fresh install gives, and old ciphertexts still decrypt', async () => {
    await installExtensionFiles();
    const url = await freshDatabase('svc_install_upgrade_it');
    engine ??= await startEngine();
    const definitions = (db: string) =>
      withClient(db, async (c) =>
        (
          await c.query<{ d: string }>(
            `SELECT p.oid::regprocedure::text || ' ' || p.proparallel::text || ' ' || p.prosecdef::text || ' ' || pg_catalog.md5(p.prosrc)
                    || ' ' || coalesce(p.proacl::text, '') AS d
               FROM pg_proc p WHERE p.pronamespace = 'svc_ext'::regnamespace ORDER BY 1`,
          )
        ).rows.map((r) => r.d),
      );
    const old = await withClient(url, async (c) => {
      await c.query("CREATE SCHEMA svc_ext; CREATE EXTENSION svc_bridge VERSION '1.0' SCHEMA svc_ext");
      await c.query(`SET svc.engine_url = '${engine?.url}'`);
      return (await c.query("SELECT svc_ext.svc_encrypt('made under 1.0', 'DEMO_RANDOM') AS c")).rows[0]?.c as string;
    });
    await withClient(url, (c) => c.query('ALTER EXTENSION svc_bridge UPDATE'));
    const reference = await freshDatabase('svc_install_fresh_it');
    await withClient(reference, (c) => c.query('CREATE SCHEMA svc_ext; CREATE EXTENSION svc_bridge SCHEMA svc_ext'));
    try {
      expect(await withClient(url, async (c) => (await c.query("SELECT extversion FROM pg_extension WHERE extname = 'svc_bridge'")).rows[0]?.extversion)).toBe('1.1');
      expect(await definitions(url)).toEqual(await definitions(reference));
      // 1.0 read the address from svc.engine_url; from 1.1 on it is the foreign server's.
      await setEngineServer(url, { url: engine.url });
      const after = await withClient(url, async (c) => {
        const { rows } = await c.query('SELECT svc_ext.svc_decrypt($1) AS p, svc_ext.svc_decrypt(svc_ext.svc_rewrap($1)) AS q', [old]);
        return rows[0];
      });
      expect(after).toEqual({ p: 'made under 1.0', q: 'made under 1.0' });
    } finally {
      await dropDatabase(adminUrl, 'svc_install_upgrade_it');
      await dropDatabase(adminUrl, 'svc_install_fresh_it');
    }
  });

  it('says which language to create first when CREATE EXTENSION finds none', async () => {
    await installExtensionFiles();
    const url = await createDatabase(adminUrl, 'svc_install_nolang_it');
    try {
      const error = await withClient(url, (c) => c.query('CREATE EXTENSION svc_bridge')).then(
        () => undefined,
        (e: pg.DatabaseError) => e,
      );
      expect(error?.code).toBe('SV003');
      expect(error?.message).toBe('svc bridge: this database has none of the bridge languages installed: plpython3u, plv8 with http, or dblink');
      expect(error?.hint).toContain('CREATE EXTENSION plpython3u;');
      expect(error?.hint).toContain('CREATE EXTENSION dblink;');
    } finally {
      await dropDatabase(adminUrl, 'svc_install_nolang_it');
    }
  });
});
