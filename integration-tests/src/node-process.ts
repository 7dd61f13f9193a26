// One Node.js entry point of this repository as a real child process: started, watched until its
// health URL answers 2xx, signalled and awaited. The engine and reference-hub helpers build on it.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { REPO_ROOT } from './postgres-harness.js';

export interface NodeProcessOptions {
  /** Name used in error messages ("engine", "hub"). */
  readonly name: string;
  /** The built entry point (its absence is reported as "run npm run build"). */
  readonly main: string;
  readonly env: Readonly<Record<string, string>>;
  /** Working directory; default: the repository root. */
  readonly cwd?: string;
  readonly healthUrl: string;
  readonly startTimeoutMs: number;
}

export interface NodeProcess {
  /** Everything the process wrote so far (stdout and stderr), across restarts. */
  output(): string;
  /** Spawns the process and resolves once the health URL answers 2xx; throws (with the output) otherwise. */
  start(): Promise<void>;
  /** Sends the signal and waits for the exit; with forceAfterMs, SIGKILL follows if it has not exited by then. */
  kill(signal: 'SIGTERM' | 'SIGKILL', forceAfterMs?: number): Promise<void>;
  /** Sends a signal to the running process without waiting for anything. */
  signal(signal: NodeJS.Signals): void;
  /** The running process's id. */
  pid(): number;
}

/** CPU time (user + system, all threads) a process has used so far, in microseconds, from /proc/<pid>/stat (Linux). */
export function cpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which is in parentheses and may contain spaces; utime and stime are
  // fields 14 and 15 of stat(5), in clock ticks (USER_HZ, 100 on Linux).
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

export function nodeProcess(options: NodeProcessOptions): NodeProcess {
  if (!existsSync(options.main)) throw new Error(`${options.main} does not exist: run \`npm run build\` first`);
  let child: ChildProcess | undefined;
  let output = '';

  const start = async (): Promise<void> => {
    const proc = spawn(process.execPath, [options.main], { cwd: options.cwd ?? REPO_ROOT, env: options.env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    proc.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    proc.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const deadline = Date.now() + options.startTimeoutMs;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`the ${options.name} exited before it was healthy:\n${output}`);
      }
      const healthy = await fetch(options.healthUrl, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (healthy) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.kill('SIGKILL');
    throw new Error(`the ${options.name} did not answer ${options.healthUrl} within ${options.startTimeoutMs} ms:\n${output}`);
  };

  const kill = async (signal: 'SIGTERM' | 'SIGKILL', forceAfterMs?: number): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    await new Promise<void>((done) => {
      const force = forceAfterMs === undefined ? undefined : setTimeout(() => proc.kill('SIGKILL'), forceAfterMs);
      proc.once('exit', () => {
        clearTimeout(force);
        done();
      });
      proc.kill(signal);
    });
  };

  const signal = (name: NodeJS.Signals): void => {
    if (!child) throw new Error(`the ${options.name} is not running`);
    child.kill(name);
  };

  const pid = (): number => {
    if (child?.pid === undefined) throw new Error(`the ${options.name} is not running`);
    return child.pid;
  };

  return { output: () => output, start, kill, signal, pid };
}
