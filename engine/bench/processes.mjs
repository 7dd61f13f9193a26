// Server processes for the HTTP figures: the engine started the way a user starts it
// (`node engine/dist/main.js --dev`) and the bare Fastify floor. Each runs in its own process so the
// load generator (this process) does not share an event loop with it; they still share the machine's
// cores, which the report says.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const engineMain = join(here, '..', 'dist', 'main.js');
const running = new Set();

// Whatever happens to the benchmark, its server processes do not outlive it.
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function track(child, name) {
  running.add(child);
  let output = '';
  const keep = (chunk) => {
    output = (output + chunk).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  exited.then(() => running.delete(child));
  return {
    name,
    pid: child.pid,
    exited,
    output: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resident set size of a process in bytes, from /proc/<pid>/status (Linux). */
export function rssBytes(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]) * 1024;
}

/** CPU time (user + system) a process has used so far, in microseconds, from /proc/<pid>/stat. */
export function cpuMicros(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime are fields 14 and 15 of stat(5), in clock ticks (USER_HZ, 100 on Linux).
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

export async function startBareServer(script = 'bare-server.mjs', name = 'bare fastify') {
  const started = performance.now();
  const child = spawn(process.execPath, [join(here, script)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const handle = track(child, name);
  const port = await new Promise((resolve, reject) => {
    let seen = '';
    child.stdout.on('data', (chunk) => {
      seen += chunk;
      const match = /listening (\d+)/.exec(seen);
      if (match) resolve(Number(match[1]));
    });
    handle.exited.then(({ code }) => reject(new Error(`${name} exited (${code}): ${handle.output()}`)));
  });
  return { ...handle, port, origin: `http://127.0.0.1:${port}`, readyMs: performance.now() - started };
}

/**
 * Starts the engine in dev mode on a free port with a throwaway data directory (or `dataDir`, kept),
 * extra environment on top; resolves once healthy, with `readyMs` from spawn to the first healthy answer.
 * BENCH_ENGINE_NODE_ARGS adds node flags to the engine only (e.g. "--cpu-prof --cpu-prof-dir=prof"),
 * which NODE_OPTIONS cannot carry.
 */
export async function startEngine(extraEnv = {}, { dataDir: kept, pollMs = 100 } = {}) {
  const nodeArgs = (process.env.BENCH_ENGINE_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  const port = await freePort();
  const dataDir = kept ?? mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const env = {
    ...process.env,
    SVC_PORT: String(port),
    SVC_HOST: '127.0.0.1',
    SVC_DATA_DIR: dataDir,
    SVC_LOG_LEVEL: 'warn',
    // Dev mode turns the wire endpoint on at 5433 (user svc, password svc-dev); a free port keeps a
    // bench clear of anything there.
    SVC_PG_PORT: String(await freePort()),
    // Likewise the operations listener (8081 by default): two engines at once must not collide.
    SVC_OPS_PORT: String(await freePort()),
    ...extraEnv,
  };
  const started = performance.now();
  const child = spawn(process.execPath, [...nodeArgs, engineMain, '--dev'], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const handle = track(child, 'engine');
  const origin = `http://127.0.0.1:${port}`;
  let exited = null;
  handle.exited.then((status) => {
    exited = status;
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`engine exited during start-up (${exited.code}): ${handle.output()}`);
    try {
      const res = await fetch(`${origin}/api/health`);
      const body = await res.json();
      if (res.status === 200 && body.status === 'UP') break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await handle.stop();
      throw new Error(`engine not healthy within 30 s: ${handle.output()}`);
    }
    await new Promise((r) => setTimeout(r, pollMs));
  }
  return {
    ...handle,
    origin,
    pgPort: Number(env.SVC_PG_PORT),
    dataDir,
    readyMs: performance.now() - started,
    async stop() {
      await handle.stop();
      if (!kept) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
