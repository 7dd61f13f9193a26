// The reference hub (engine/dist/reference-hub/main.js) as a real process for the fault tests, with
// its state in a file so it can be stopped and started again on the same port, and a small client
// for its admin API (tenants, policies, keys, rotation, registering and pushing to an engine).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, REPO_ROOT } from './postgres-harness.js';

export const HUB_MAIN = join(REPO_ROOT, 'engine', 'dist', 'reference-hub', 'main.js');

export interface RunningHub {
  /** `http://127.0.0.1:<port>`, also the URL engines are registered with. */
  readonly url: string;
  readonly port: number;
  output(): string;
  /** Starts the process (again) on the same port and state file; resolves once /hub/health answers. */
  start(): Promise<void>;
  /** SIGTERM, then waits for the exit (the hub writes its state before exiting). */
  stop(): Promise<void>;
  dispose(): Promise<void>;
  /** Calls the admin API; throws with the hub's answer on a non-2xx status. */
  admin<T = Record<string, unknown>>(method: 'GET' | 'PUT' | 'POST', path: string, body?: unknown): Promise<T>;
}

export async function startHub(): Promise<RunningHub> {
  if (!existsSync(HUB_MAIN)) throw new Error(`${HUB_MAIN} does not exist: run \`npm run build\` first`);
  const dir = await mkdtemp(join(tmpdir(), 'svc-hub-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env = {
    ...(process.env as Record<string, string>),
    SVC_HUB_HOST: '127.0.0.1',
    SVC_HUB_PORT: String(port),
    SVC_HUB_STATE_FILE: join(dir, 'hub-state.json'),
    SVC_HUB_PUBLIC_URL: url,
    SVC_LOG_LEVEL: 'warn',
  };
  let child: ChildProcess | undefined;
  let output = '';

  const start = async (): Promise<void> => {
    const proc = spawn(process.execPath, [HUB_MAIN], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    proc.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`the hub exited during start-up:\n${output}`);
      const healthy = await fetch(`${url}/hub/health`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (healthy) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.kill('SIGKILL');
    throw new Error(`the hub did not become healthy:\n${output}`);
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((done) => {
      proc.once('exit', () => done());
      proc.kill('SIGTERM');
    });
  };

  const admin = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const response = await fetch(`${url}/hub/admin${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`hub admin ${method} ${path} answered ${response.status}: ${text}`);
    return JSON.parse(text) as T;
  };

  await start();
  return {
    url,
    port,
    output: () => output,
    start,
    stop,
    dispose: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
    admin,
  };
}
