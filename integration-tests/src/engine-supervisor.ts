// The engine as a real process (`node engine/dist/main.js`, as the README starts it) under test
// control for the fault tests: start, SIGKILL or SIGTERM, and start again on the same port, data
// directory and environment. The general helper (engine-process.ts) covers the graceful cases.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENGINE_MAIN } from './engine-process.js';
import { freePort, REPO_ROOT } from './postgres-harness.js';

export interface SupervisedEngine {
  readonly url: string;
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
  const url = `http://127.0.0.1:${port}`;
  const fullEnv = {
    ...(process.env as Record<string, string>),
    SVC_PORT: String(port),
    SVC_HOST: '127.0.0.1',
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'info',
    ...env,
  };
  let child: ChildProcess | undefined;
  let output = '';

  const start = async (): Promise<void> => {
    const proc = spawn(process.execPath, [ENGINE_MAIN], { cwd: REPO_ROOT, env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    proc.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`the engine exited during start-up:\n${output}`);
      const healthy = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.status === 200,
        () => false,
      );
      if (healthy) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.kill('SIGKILL');
    throw new Error(`the engine did not become healthy:\n${output}`);
  };

  const kill = async (signal: 'SIGKILL' | 'SIGTERM'): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((done) => {
      proc.once('exit', () => done());
      proc.kill(signal);
    });
  };

  await start();
  return {
    url,
    dataDir,
    output: () => output,
    start,
    kill,
    dispose: async () => {
      await kill('SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
