// Footprint of the embedded default (docs/operations.md, "Embedded store footprint"): warm start (spawn
// to the first healthy answer, on a data directory an earlier start filled) and idle RSS (the engine
// and any store process it runs, once the store process had time to end), each beside the same figure
// for the bare Fastify process of this run.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { rssBytes, startBareServer, startEngine } from './processes.mjs';

const MIB = 1024 * 1024;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** RSS of a process and its children (the embedded store process), from /proc. */
function treeRss(pid) {
  let total = rssBytes(pid);
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let children = '';
    try {
      children = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8');
    } catch {
      continue;
    }
    for (const child of children.split(' ').filter((c) => c !== '')) total += treeRss(Number(child));
  }
  return total;
}

export async function footprint({ starts, idleWaitMs, log }) {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-footprint-'));
  const warm = [];
  const bareStarts = [];
  let idle;
  let bareRss;
  try {
    const first = await startEngine({}, { dataDir, pollMs: 10 });
    const cold = first.readyMs;
    await first.stop();
    for (let i = 0; i < starts; i++) {
      const bare = await startBareServer();
      bareStarts.push(bare.readyMs);
      bareRss = rssBytes(bare.pid);
      await bare.stop();
      const engine = await startEngine({}, { dataDir, pollMs: 10 });
      warm.push(engine.readyMs);
      if (i === starts - 1) {
        await new Promise((resolve) => setTimeout(resolve, idleWaitMs));
        idle = treeRss(engine.pid);
      }
      await engine.stop();
    }
    const warmMs = median(warm);
    log(
      `  warm start: median ${warmMs.toFixed(0)} ms, range ${Math.min(...warm).toFixed(0)}-${Math.max(...warm).toFixed(0)} ms ` +
        `(${warm.map((ms) => ms.toFixed(0)).join(', ')}; fresh data directory: ${cold.toFixed(0)} ms); ` +
        `load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`,
    );
    const bareMs = median(bareStarts);
    return [
      ['warm start (embedded default)', `${warmMs.toFixed(0)} ms`, '-', 'bare Fastify start', (warmMs / bareMs).toFixed(2), '<= 1500 ms', warmMs <= 1500 ? 'met' : 'MISSED', '-'],
      [`idle RSS after ${(idleWaitMs / 1000).toFixed(0)} s (engine + store)`, `${(idle / MIB).toFixed(0)} MiB`, '-', 'bare Fastify RSS', (idle / bareRss).toFixed(2), '<= 150 MiB', idle <= 150 * MIB ? 'met' : 'MISSED', '-'],
    ];
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}
