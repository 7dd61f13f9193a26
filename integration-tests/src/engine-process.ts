// Starts the engine as a real process, the way the README starts it (`node engine/dist/main.js` after
// `npm run build`), on a free port with its own data directory, waits for GET /api/health to answer 200,
// and stops it. Tests either pass a bootstrap document (known keys, so ciphertexts survive a restart)
// or use dev mode (the demo policies DEMO_RANDOM and DEMO_DETERMINISTIC with fresh keys).
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, REPO_ROOT } from './postgres-harness.js';

export interface EngineOptions {
  /** A bootstrap document (written to a file and passed as SVC_BOOTSTRAP_FILE). Without it: dev mode. */
  readonly bootstrap?: unknown;
  /** Extra environment for the process (wins over the defaults below). */
  readonly env?: Readonly<Record<string, string>>;
  /** A fixed port (e.g. to restart on the same address); default: a free one. */
  readonly port?: number;
  /** How long to wait for health; default 30 s. */
  readonly startTimeoutMs?: number;
}

export interface RunningEngine {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** Everything the process wrote so far (stdout and stderr). */
  output(): string;
  /** Stops the process (SIGTERM, then SIGKILL after 5 s). Idempotent. */
  stop(): Promise<void>;
  /** Stops and starts again on the same port and data directory. */
  restart(): Promise<void>;
  /** Stops the process and removes its data directory. */
  dispose(): Promise<void>;
}

export const ENGINE_MAIN = join(REPO_ROOT, 'engine', 'dist', 'main.js');

export async function startEngine(options: EngineOptions = {}): Promise<RunningEngine> {
  if (!existsSync(ENGINE_MAIN)) {
    throw new Error(`${ENGINE_MAIN} does not exist: run \`npm run build\` first`);
  }
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-engine-'));
  const port = options.port ?? (await freePort());
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    SVC_PORT: String(port),
    SVC_HOST: '127.0.0.1',
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'warn',
  };
  if (options.bootstrap === undefined) {
    env.SVC_DEV_MODE = 'true';
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
  let child: ChildProcess | undefined;
  let output = '';

  const start = async (): Promise<void> => {
    const proc = spawn(process.execPath, [ENGINE_MAIN], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    proc.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    proc.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    await waitForHealth(url, proc, options.startTimeoutMs ?? 30_000, () => output);
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((done) => {
      const killer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      proc.once('exit', () => {
        clearTimeout(killer);
        done();
      });
      proc.kill('SIGTERM');
    });
  };

  await start();
  return {
    url,
    port,
    dataDir,
    output: () => output,
    stop,
    restart: async () => {
      await stop();
      await start();
    },
    dispose: async () => {
      await stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

async function waitForHealth(url: string, proc: ChildProcess, timeoutMs: number, output: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  proc.once('exit', () => {
    exited = true;
  });
  while (Date.now() < deadline) {
    if (exited) throw new Error(`the engine exited before it was healthy:\n${output()}`);
    try {
      const res = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(1000) });
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill('SIGKILL');
  throw new Error(`the engine did not answer GET /api/health with 200 within ${timeoutMs} ms:\n${output()}`);
}
