// `npm run bench:soak`: the engine (embedded default, dev mode) under a steady load of 80% of the
// maximum it reached in this run, for BENCH_SOAK_SECONDS (default 600), sampled every 10 s: RSS of
// the engine with its store process, and the p99 latency of that window. It says whether RSS stayed
// flat: the last minute's RSS within 10% (and 32 MiB) of the second minute's. A measurement, not a
// test: it exits 0 either way, and 1 only if requests failed.
import autocannon from 'autocannon';
import { readdirSync, readFileSync } from 'node:fs';
import { postLoad } from './http-load.mjs';
import { rssBytes, startEngine } from './processes.mjs';

const MIB = 1024 * 1024;
const seconds = Number(process.env.BENCH_SOAK_SECONDS ?? 600);
const window = 10;
const body = JSON.stringify({ data: 'soak-value-0123456789abcdef', policyCode: 'DEMO_RANDOM' });

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

const engine = await startEngine();
try {
  const url = `${engine.origin}/api/encrypt`;
  const { rate: max } = await postLoad({ url, body, contentType: 'application/json', connections: 10, seconds: 5 });
  const target = Math.round(max * 0.8);
  process.stdout.write(`single JSON encrypt: maximum ${max.toFixed(0)} req/s; soak at ${target} req/s for ${seconds} s\n`);
  process.stdout.write('t(s)  RSS(MiB)  req/s  p99(ms)\n');
  const samples = [];
  for (let t = window; t <= seconds; t += window) {
    const result = await autocannon({
      url,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      connections: 10,
      overallRate: target,
      duration: window,
    });
    if (result.errors || result.timeouts || result.non2xx) {
      throw new Error(`requests failed: ${result.errors} errors, ${result.timeouts} timeouts, ${result.non2xx} non-2xx`);
    }
    const sample = { t, rss: treeRss(engine.pid), rate: result.requests.average, p99: result.latency.p99 };
    samples.push(sample);
    process.stdout.write(`${String(t).padStart(4)}  ${(sample.rss / MIB).toFixed(1).padStart(8)}  ${String(sample.rate).padStart(5)}  ${String(sample.p99).padStart(7)}\n`);
  }
  const minute = (from) => samples.filter((s) => s.t > from && s.t <= from + 60).map((s) => s.rss);
  const avg = (values) => values.reduce((a, b) => a + b, 0) / values.length;
  const early = avg(minute(60).length ? minute(60) : minute(0));
  const late = avg(minute(Math.max(0, seconds - 60)));
  const growth = late - early;
  const flat = growth <= Math.max(0.1 * early, 32 * MIB);
  const p99s = samples.map((s) => s.p99).sort((a, b) => a - b);
  process.stdout.write(
    `RSS ${(early / MIB).toFixed(1)} MiB (second minute) -> ${(late / MIB).toFixed(1)} MiB (last minute): ` +
      `${flat ? 'flat' : 'GROWING'} (${(growth / MIB).toFixed(1)} MiB); p99 per window: median ${p99s[Math.floor(p99s.length / 2)]} ms, worst ${p99s.at(-1)} ms\n`,
  );
} finally {
  await engine.stop();
}
process.exit(0);
