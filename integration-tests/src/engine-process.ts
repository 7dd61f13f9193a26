// Starts the engine as a real process, the way the README starts it (`node engine/dist/main.js` after
// `npm run build`), on a free port (and a free operations port) with its own data directory, waits for GET /api/health to answer 200,
// and stops it. Tests either pass a bootstrap document (known keys, so ciphertexts survive a restart)
// or use dev mode (the demo policies DEMO_RANDOM and DEMO_DETERMINISTIC with fresh keys).
import { randomBytes } from 'node:crypto';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeProcess } from './node-process.js';
import { freePort, REPO_ROOT } from './postgres-harness.js';

export interface EngineOptions {
  /** A bootstrap document (written to a file and passed as SVC_BOOTSTRAP_FILE). Without it: dev mode. */
  readonly bootstrap?: unknown;
  /** Extra environment for the process (wins over the defaults below). */
  readonly env?: Readonly<Record<string, string>>;
  /** A fixed port (e.g. to restart on the same address); default: a free one. */
  readonly port?: number;
  /** A fixed operations API port; default: a free one. */
  readonly opsPort?: number;
  /** How long to wait for health; default 30 s. */
  readonly startTimeoutMs?: number;
  /** The data directory of an engine stopped before (same store, another environment); default: a new one. */
  readonly dataDir?: string;
}

export interface RunningEngine {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  /** The operations API (`/engine/api/v1`, its own loopback listener): `http://127.0.0.1:<opsPort>` */
  readonly opsUrl: string;
  /** The PostgreSQL wire endpoint's port, when it is on (dev mode, or SVC_PG_PORT in `env`). */
  readonly pgPort?: number;
  readonly dataDir: string;
  /** Everything the process wrote so far (stdout and stderr). */
  output(): string;
  /** Sends a signal to the process (e.g. SIGUSR2 under SVC_TEST_HOOKS ends a crypto worker). */
  signal(signal: NodeJS.Signals): void;
  /** The running process's id (its crypto workers are threads of it). */
  pid(): number;
  /** Stops the process (SIGTERM, then SIGKILL after 5 s). Idempotent. */
  stop(): Promise<void>;
  /** Stops and starts again on the same port and data directory. */
  restart(): Promise<void>;
  /** Stops the process and removes its data directory. */
  dispose(): Promise<void>;
}

export const ENGINE_MAIN = join(REPO_ROOT, 'engine', 'dist', 'main.js');

export async function startEngine(options: EngineOptions = {}): Promise<RunningEngine> {
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'svc-engine-')));
  const port = options.port ?? (await freePort());
  // SVC_OPS_SHARED=true puts the operations API on the execution listener (then opsUrl is url).
  const shared = options.env?.SVC_OPS_SHARED === 'true';
  const opsPort = shared ? port : (options.opsPort ?? (await freePort()));
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    SVC_PORT: String(port),
    ...(shared ? {} : { SVC_OPS_PORT: String(opsPort) }),
    SVC_HOST: '127.0.0.1',
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'warn',
  };
  if (options.bootstrap === undefined) {
    env.SVC_DEV_MODE = 'true';
    // Dev mode turns the wire endpoint on at 5433; a free port keeps engines of parallel runs apart.
    env.SVC_PG_PORT = String(await freePort());
  } else {
    const file = join(dataDir, 'bootstrap.json');
    await writeFile(file, JSON.stringify(options.bootstrap), { mode: 0o600 });
    env.SVC_BOOTSTRAP_FILE = file;
    // Outside dev mode the engine needs a master key (it wraps the stored keys); one per engine, kept
    // across restarts of that engine since `env` is reused.
    env.SVC_MASTER_KEY = randomBytes(32).toString('base64');
  }
  Object.assign(env, options.env);

  const url = `http://127.0.0.1:${port}`;
  const proc = nodeProcess({ name: 'engine', main: ENGINE_MAIN, env, healthUrl: `${url}/api/health`, startTimeoutMs: options.startTimeoutMs ?? 30_000 });
  const start = proc.start;
  const stop = () => proc.kill('SIGTERM', 5000);

  await start();
  return {
    url,
    port,
    opsUrl: `http://127.0.0.1:${opsPort}`,
    pgPort: env.SVC_PG_PORT ? Number(env.SVC_PG_PORT) : undefined,
    dataDir,
    output: proc.output,
    signal: proc.signal,
    pid: proc.pid,
    stop,
    restart: async () => {
      await stop();
      await start();
    },
    dispose: async () => {
      await stop();
      await removeDataDir(dataDir);
    },
  };
}

/**
 * Removes an engine's data directory once its store process has ended too: after a SIGKILL of the
 * engine, the store process still closes PGlite (and writes) for a moment; its lock file says when.
 */
export async function removeDataDir(dataDir: string): Promise<void> {
  const lock = join(dataDir, 'store.lock');
  for (let i = 0; i < 300; i++) {
    if (!(await access(lock).then(() => true, () => false))) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await rm(dataDir, { recursive: true, force: true, maxRetries: 5 });
}
