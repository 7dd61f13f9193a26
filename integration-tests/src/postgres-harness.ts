// The PostgreSQL the integration tests run against, found in this order:
//   1. TEST_DATABASE_URL, when set (an admin URL: the tests create and drop their own databases);
//   2. a container started with testcontainers, when a container runtime answers quickly;
//   3. a throwaway local cluster: initdb in a temporary directory (as the `postgres` user when we run as
//      root, because initdb refuses root), a random free port, the socket in the same directory.
// When none can be had, startPostgres() throws an error saying why each source failed, so a run never
// passes silently without a database. Also: helpers to create per-suite databases and to apply SQL files.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

export type PostgresSource = 'env' | 'container' | 'local';

export interface RunningPostgres {
  /** Superuser URL of the maintenance database (`postgres`). */
  readonly adminUrl: string;
  readonly source: PostgresSource;
  /** The server's binaries directory when it is a local cluster (pg_dump of the same version lives there). */
  readonly binDir?: string;
  /** Why the earlier sources were not used (for the run's log). */
  readonly notes: readonly string[];
  stop(): Promise<void>;
}

export interface StartOptions {
  /** The image to build when a container runtime answers; default: the `bridge-base` stage of docker/postgres.Dockerfile. */
  readonly containerDockerfile?: { context: string; file: string; target?: string; buildArgs?: Record<string, string> };
  /** Extra `-c name=value` server settings for a local cluster. */
  readonly settings?: Readonly<Record<string, string>>;
}

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

/** Gets a PostgreSQL for this run, or throws with the reason each source could not be used. */
export async function startPostgres(options: StartOptions = {}): Promise<RunningPostgres> {
  const notes: string[] = [];
  const fromEnv = process.env.TEST_DATABASE_URL;
  if (fromEnv) {
    await assertReachable(fromEnv, 'TEST_DATABASE_URL');
    return { adminUrl: fromEnv, source: 'env', notes, stop: async () => {} };
  }
  notes.push('TEST_DATABASE_URL is not set');

  const runtime = await detectContainerRuntime();
  if (runtime.available) {
    return startContainer(options, [...notes]);
  }
  notes.push(`container runtime not available (${runtime.reason})`);

  const binDir = findPostgresBinDir();
  if (!binDir) {
    throw new Error(
      `no PostgreSQL for the integration tests: ${notes.join('; ')}; and no local PostgreSQL binaries ` +
        '(looked for SVC_PG_BINDIR, /usr/lib/postgresql/<version>/bin and pg_config --bindir). ' +
        'Install postgresql-15 (Debian) or set TEST_DATABASE_URL.',
    );
  }
  return startLocalCluster(binDir, options, notes);
}

export interface RuntimeDetection {
  readonly available: boolean;
  readonly reason: string;
}

/** Asks the container runtime's API for `/_ping` with a short timeout; never hangs the run. */
export async function detectContainerRuntime(timeoutMs = 1500): Promise<RuntimeDetection> {
  const host = process.env.DOCKER_HOST;
  let target: { socketPath: string } | { host: string; port: number };
  if (host?.startsWith('tcp://')) {
    const url = new URL(host.replace('tcp://', 'http://'));
    target = { host: url.hostname, port: Number(url.port || 2375) };
  } else {
    const socketPath = host?.startsWith('unix://') ? host.slice('unix://'.length) : '/var/run/docker.sock';
    if (!existsSync(socketPath)) return { available: false, reason: `no socket at ${socketPath}` };
    target = { socketPath };
  }
  return new Promise((done) => {
    const req = request({ ...target, path: '/_ping', method: 'GET', timeout: timeoutMs }, (res) => {
      res.resume();
      done(
        res.statusCode === 200
          ? { available: true, reason: 'ping answered' }
          : { available: false, reason: `ping answered ${res.statusCode}` },
      );
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (error) => done({ available: false, reason: error.message }));
    req.end();
  });
}

export async function startContainer(options: StartOptions, notes: string[] = []): Promise<RunningPostgres> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const dockerfile = options.containerDockerfile ?? {
    context: REPO_ROOT,
    file: 'docker/postgres.Dockerfile',
    target: 'bridge-base',
  };
  let builder = GenericContainer.fromDockerfile(dockerfile.context, dockerfile.file).withBuildArgs(dockerfile.buildArgs ?? {});
  if (dockerfile.target) builder = builder.withTarget(dockerfile.target);
  const image = await builder.build(`svc-postgres-test-${dockerfile.target ?? 'full'}`, { deleteOnExit: false });
  const container = await image
    .withEnvironment({ POSTGRES_PASSWORD: 'postgres', POSTGRES_HOST_AUTH_METHOD: 'trust' })
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start();
  const adminUrl = `postgres://postgres:postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`;
  await assertReachable(adminUrl, 'the PostgreSQL container');
  return {
    adminUrl,
    source: 'container',
    notes,
    stop: async () => {
      await container.stop();
    },
  };
}

/** The newest /usr/lib/postgresql/<n>/bin, SVC_PG_BINDIR, or pg_config's answer. */
export function findPostgresBinDir(): string | undefined {
  const override = process.env.SVC_PG_BINDIR;
  if (override) return existsSync(join(override, 'initdb')) ? override : undefined;
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base)
      .filter((v) => existsSync(join(base, v, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions[0]) return join(base, versions[0], 'bin');
  }
  try {
    const dir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
    return existsSync(join(dir, 'initdb')) ? dir : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A port that was free a moment ago, for a server a test starts next. Chosen at random below the kernel's
 * ephemeral range (32768 and up on Linux): a port the kernel picked for listen(0) goes back to that range
 * when it is closed, where any outgoing connection of the parallel test files may take it before the
 * server binds it (an engine failing with EADDRINUSE).
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if ((await tryListen(port)) !== undefined) return port;
  }
  const port = await tryListen(0);
  if (port === undefined) throw new Error('no free port');
  return port;
}

/** Listens on 127.0.0.1:`port` and closes again: the port bound, or undefined when it is taken. */
function tryListen(port: number): Promise<number | undefined> {
  return new Promise((done) => {
    const server = createServer();
    server.unref();
    server.on('error', () => done(undefined));
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => done(typeof address === 'object' && address ? address.port : undefined));
    });
  });
}

/** Runs a PostgreSQL binary, as `postgres` when we are root (the server refuses to run as root). */
async function runPg(binDir: string, tool: string, args: string[]): Promise<string> {
  const asRoot = process.getuid?.() === 0;
  const [file, argv] = asRoot
    ? ['runuser', ['-u', 'postgres', '--', join(binDir, tool), ...args]]
    : [join(binDir, tool), args];
  try {
    const { stdout } = await run(file, argv, { maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const detail = error as { stderr?: string; message: string };
    throw new Error(`${tool} failed: ${detail.stderr?.trim() || detail.message}`);
  }
}

async function startLocalCluster(
  binDir: string,
  options: StartOptions,
  notes: readonly string[],
): Promise<RunningPostgres> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-pg-'));
  const dataDir = join(dir, 'data');
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    await chown(dir, uid, gid);
  }
  await chmod(dir, 0o700);
  const port = await freePort();
  await runPg(binDir, 'initdb', ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8']);
  // A throwaway cluster: durability settings off, enough connections for the concurrency tests.
  const settings: Record<string, string> = {
    listen_addresses: '127.0.0.1',
    port: String(port),
    unix_socket_directories: dir,
    fsync: 'off',
    synchronous_commit: 'off',
    full_page_writes: 'off',
    max_connections: '60',
    ...options.settings,
  };
  const serverOptions = Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value}`)
    .join(' ');
  const log = join(dir, 'server.log');
  await runPg(binDir, 'pg_ctl', ['-D', dataDir, '-l', log, '-o', serverOptions, '-w', '-t', '60', 'start']);
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await assertReachable(adminUrl, 'the local cluster');
  return {
    adminUrl,
    source: 'local',
    binDir,
    notes,
    stop: async () => {
      await runPg(binDir, 'pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function assertReachable(url: string, what: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (error) {
    throw new Error(`cannot reach ${what} (${redact(url)}): ${(error as Error).message}`);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The URL without its password, for messages. */
export function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}

/** The same server, another database. */
export function databaseUrl(adminUrl: string, database: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** Creates a fresh database (dropping a leftover of the same name) and returns its URL. */
export async function createDatabase(adminUrl: string, name: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`invalid database name: ${name}`);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
  } finally {
    await client.end();
  }
  return databaseUrl(adminUrl, name);
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

/** Runs a client for one callback and always closes it. */
export async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The error a statement (or any promise) was expected to fail with; throws when it succeeded. */
export async function sqlFailure(statement: Promise<unknown>): Promise<pg.DatabaseError> {
  try {
    await statement;
  } catch (error) {
    return error as pg.DatabaseError;
  }
  throw new Error('the statement was expected to fail');
}

/** The binaries directory of the server's version (for pg_dump / psql), when they exist on this machine. */
export async function clientBinDir(url: string): Promise<string | undefined> {
  const major = await withClient(
    url,
    async (c) => (await c.query<{ v: string }>('SHOW server_version_num')).rows[0]?.v,
  );
  const dir = `/usr/lib/postgresql/${Math.floor(Number(major) / 10000)}/bin`;
  return existsSync(join(dir, 'pg_dump')) ? dir : undefined;
}
