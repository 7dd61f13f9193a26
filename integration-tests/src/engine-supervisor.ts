// The engine as a real process (`node engine/dist/main.js`, as the README starts it) under test
// control for the fault tests: start, SIGKILL or SIGTERM, and start again on the same port, data
// directory and environment. The general helper (engine-process.ts) covers the graceful cases.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENGINE_MAIN, removeDataDir } from './engine-process.js';
import { nodeProcess } from './node-process.js';
import { freePort } from './postgres-harness.js';

export interface SupervisedEngine {
  readonly url: string;
  /** The operations API on its own loopback listener. */
  readonly opsUrl: string;
  readonly dataDir: string;
  output(): string;
  start(): Promise<void>;
  /** Sends the signal and waits for the process to exit (SIGKILL: no shutdown code runs). */
  kill(signal: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  dispose(): Promise<void>;
}

export async function superviseEngine(env: Readonly<Record<string, string>>): Promise<SupervisedEngine> {
  const dataDir = await mkdtemp(join(tmpdir(), 'svc-engine-fault-'));
  const port = await freePort();
  const opsPort = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const fullEnv = {
    ...(process.env as Record<string, string>),
    SVC_PORT: String(port),
    SVC_OPS_PORT: String(opsPort),
    SVC_HOST: '127.0.0.1',
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'info',
    ...env,
  };
  const proc = nodeProcess({ name: 'engine', main: ENGINE_MAIN, env: fullEnv, healthUrl: `${url}/api/health`, startTimeoutMs: 30_000 });
  const start = proc.start;
  const kill = (signal: 'SIGKILL' | 'SIGTERM') => proc.kill(signal);

  await start();
  return {
    url,
    opsUrl: `http://127.0.0.1:${opsPort}`,
    dataDir,
    output: proc.output,
    start,
    kill,
    dispose: async () => {
      await kill('SIGKILL');
      await removeDataDir(dataDir);
    },
  };
}
