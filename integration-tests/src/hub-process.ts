// The reference hub (engine/dist/reference-hub/main.js) as a real process for the fault tests, with
// its state in a file so it can be stopped and started again on the same port, and a small client
// for its admin API (tenants, policies, keys, rotation, registering and pushing to an engine).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeProcess } from './node-process.js';
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
  const proc = nodeProcess({ name: 'hub', main: HUB_MAIN, env, healthUrl: `${url}/hub/health`, startTimeoutMs: 20_000 });
  const start = proc.start;
  // SIGTERM and no forced kill: the hub writes its state file on the way out.
  const stop = () => proc.kill('SIGTERM');

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
    output: proc.output,
    start,
    stop,
    dispose: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
    admin,
  };
}
