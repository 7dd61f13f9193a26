// `npm run bench`: measures the execution API against the limits below it, all in one run on one
// machine, and prints each figure as a ratio to its reference: raw node:crypto GCM (platform limit) ▸
// the core's encryptMany (no HTTP) ▸ a bare Fastify route (framework floor) ▸ the engine as a real
// process on one core (SVC_WORKERS=1: single, JSON batch, binary frame batch, NDJSON stream), the single
// request also against a Fastify route doing only the core's encryptOne ▸ the engine on all cores (the
// default SVC_WORKERS: JSON batch and binary frame, docs/workers.md), also against as many one-core
// engines loaded at once (what this machine allows any multi-core engine, load generator included) ▸ the
// PostgreSQL wire endpoint's serial round trip against a TCP echo floor ▸ stream memory over ~1 GiB ▸
// warm start and idle RSS of the embedded default.
// A measurement, not a test: missed targets still exit 0; any failed request or item exits 1.
// Options: --quick (small smoke run); --footprint (only the footprint rows: warm start and idle RSS);
// BENCH_STREAM_BYTES (memory run size, default 1 GiB); BENCH_FOOTPRINT_STARTS (warm starts measured,
// default 5); BENCH_ENGINE_NODE_ARGS (node flags for the engine process, e.g. to profile it with
// --cpu-prof).
import { availableParallelism, cpus, loadavg } from 'node:os';
import { encodeRequestFrame } from '../dist/http/codecs/binary-frame.js';
import { auditOverhead } from './audit-run.mjs';
import { footprint } from './footprint-run.mjs';
import { postLoad } from './http-load.mjs';
import { coreEncryptManySampler, POLICY, plaintexts, rawGcmSampler } from './in-process.mjs';
import { formatCpu, formatRate, formatSamples, rounds, table } from './measure.mjs';
import { streamMemory } from './memory-run.mjs';
import { streamEncrypt } from './ndjson-client.mjs';
import { pgwireRoundTrips } from './pgwire-run.mjs';
import { cpuMicros, startBareServer, startEngine } from './processes.mjs';
import { checkFrameBatch, checkJsonBatch, checkSingle } from './round-trip.mjs';

const MIB = 1024 * 1024;
const quick = process.argv.includes('--quick');
const footprintOnly = process.argv.includes('--footprint');
for (const arg of process.argv.slice(2)) {
  if (arg !== '--quick' && arg !== '--footprint') throw new Error(`unknown argument "${arg}" (the flags are --quick and --footprint)`);
}

function footprintStarts() {
  const raw = process.env.BENCH_FOOTPRINT_STARTS;
  if (raw === undefined || raw === '') return quick ? 2 : 5;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error('BENCH_FOOTPRINT_STARTS must be a positive integer');
  return value;
}

function streamBytesSetting() {
  const raw = process.env.BENCH_STREAM_BYTES;
  if (raw === undefined || raw === '') return quick ? 32 * MIB : 1024 * MIB;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error('BENCH_STREAM_BYTES must be a positive integer');
  return value;
}

const settings = {
  dataBytes: 32,
  largeDataBytes: 1024,
  batchItems: 1000,
  rounds: quick ? 2 : 5,
  inProcessMs: quick ? 200 : 1000,
  httpSeconds: quick ? 1 : 3,
  warmupSeconds: quick ? 1 : 2,
  singleConnections: 10,
  batchConnections: 8,
  ndjsonBytes: quick ? 2 * MIB : 8 * MIB,
  streamBytes: streamBytesSetting(),
  streamDataBytes: 1024,
};

function log(message) {
  process.stdout.write(`${message}\n`);
}

/** The engine's default SVC_WORKERS: one crypto worker thread per core this process may use. */
const CORES = availableParallelism();

const F = {
  raw: `raw GCM ${settings.dataBytes} B`,
  rawLarge: `raw GCM ${settings.largeDataBytes} B`,
  core: `core encryptMany ${settings.dataBytes} B`,
  coreLarge: `core encryptMany ${settings.largeDataBytes} B`,
  bare: 'bare Fastify route',
  single: 'engine single JSON encrypt',
  coreRoute: 'Fastify route + core encryptOne',
  json: `engine JSON batch x${settings.batchItems}`,
  frame: `engine binary frame x${settings.batchItems}`,
  ndjson: 'engine NDJSON stream (1 conn)',
  rawAll: `${CORES}x raw GCM ${settings.dataBytes} B`,
  jsonAll: `all cores (${CORES} workers) JSON batch x${settings.batchItems}`,
  frameAll: `all cores (${CORES} workers) binary frame x${settings.batchItems}`,
  jsonCeiling: `${CORES} one-core engines at once, JSON batch x${settings.batchItems}`,
  frameCeiling: `${CORES} one-core engines at once, binary frame x${settings.batchItems}`,
  echo: 'TCP echo serial round trip',
  wire: 'pgwire svc_encrypt serial (pg client)',
  wireMany: `pgwire svc_encrypt_many x${settings.batchItems}`,
};

/** Figure name -> [unit, reference figure, target ratio]. */
const REPORT = [
  [F.raw, 'items/s'],
  [F.rawLarge, 'items/s'],
  [F.core, 'items/s', F.raw, 0.8],
  [F.coreLarge, 'items/s', F.rawLarge, 0.8],
  [F.bare, 'req/s'],
  [F.single, 'req/s', F.bare, 0.8],
  // The framework and the encryption alone, against the bare route; the engine against them (its own features).
  [F.coreRoute, 'req/s', F.bare],
  [F.single, 'req/s', F.coreRoute],
  [F.json, 'items/s', F.core, 0.7],
  [F.frame, 'items/s', F.core, 0.85],
  [F.ndjson, 'items/s', F.core],
  // The engine on all cores against the same engine on one (same run) and against N x the raw loop.
  [F.jsonAll, 'items/s', F.json, 1.7],
  [F.frameAll, 'items/s', F.frame, 1.7],
  [F.jsonAll, 'items/s', F.rawAll],
  [F.frameAll, 'items/s', F.rawAll],
  // The machine's ceiling for any multi-core engine (no threads to feed, nothing shared), against one
  // core, and the worker pool against that ceiling.
  [F.jsonCeiling, 'items/s', F.json],
  [F.frameCeiling, 'items/s', F.frame],
  [F.jsonAll, 'items/s', F.jsonCeiling],
  [F.frameAll, 'items/s', F.frameCeiling],
  [F.echo, 'req/s'],
  [F.wire, 'req/s', F.echo],
  [F.wireMany, 'items/s', F.core],
];

function report(results) {
  const rows = [['figure', 'median rate', 'CPU us/item', 'reference', 'ratio', 'target', 'result', 'CPU ratio']];
  const logged = new Set();
  for (const [name, unit, refName, target] of REPORT) {
    const figure = results.get(name);
    if (!logged.has(name)) log(`  ${name}: ${formatRate(figure.median)} ${unit} (runs: ${formatSamples(figure.samples)})`);
    logged.add(name);
    const rate = `${formatRate(figure.median)} ${unit}`;
    const cpu = formatCpu(figure.cpu);
    if (!refName) {
      rows.push([name, rate, cpu, '-', '-', '-', '-', '-']);
      continue;
    }
    const reference = results.get(refName);
    const ratio = figure.median / reference.median;
    const hasTarget = target !== undefined;
    rows.push([
      name,
      rate,
      cpu,
      refName,
      ratio.toFixed(2),
      hasTarget ? `>= ${target.toFixed(2)}` : '-',
      hasTarget ? (ratio >= target ? 'met' : 'MISSED') : '-',
      (reference.cpu / figure.cpu).toFixed(2),
    ]);
  }
  return rows;
}

/**
 * An HTTP sampler: one autocannon run, as items per second, with the server's CPU per item; warmed up
 * once before the rounds.
 */
async function httpSampler(server, itemsPerRequest, options) {
  await postLoad({ ...options, seconds: settings.warmupSeconds });
  return async () => {
    const before = cpuMicros(server.pid);
    const { rate, requests } = await postLoad({ ...options, seconds: settings.httpSeconds });
    return { rate: rate * itemsPerRequest, cpu: (cpuMicros(server.pid) - before) / (requests * itemsPerRequest) };
  };
}

/**
 * Like httpSampler, over several servers loaded at once (the connections shared among them): the
 * items/s of all together, and the CPU of all per item.
 */
async function parallelHttpSampler(servers, itemsPerRequest, options) {
  const connections = Math.max(1, Math.round(options.connections / servers.length));
  const load = (seconds) => Promise.all(servers.map((server) => postLoad({ ...options, url: options.url(server), connections, seconds })));
  await load(settings.warmupSeconds);
  return async () => {
    const cpu = () => servers.reduce((sum, server) => sum + cpuMicros(server.pid), 0);
    const before = cpu();
    const runs = await load(settings.httpSeconds);
    const requests = runs.reduce((sum, run) => sum + run.requests, 0);
    const rate = runs.reduce((sum, run) => sum + run.rate, 0);
    return { rate: rate * itemsPerRequest, cpu: (cpu() - before) / (requests * itemsPerRequest) };
  };
}

async function measureAll({ bare, coreRoute, engine, allCores, oneCoreEngines }) {
  const { dataBytes: small, largeDataBytes: large, inProcessMs: ms } = settings;
  const single = { data: plaintexts(1, small)[0], policyCode: POLICY };
  const singleBody = JSON.stringify(single);
  const items = plaintexts(settings.batchItems, small).map((data) => ({ data, policyCode: POLICY }));
  const frame = encodeRequestFrame('encrypt', items);
  const stream = { origin: engine.origin, dataBytes: small, policyCode: POLICY };

  // Every request is checked once, item by item and back through decrypt, before it is put under load.
  await checkSingle(engine.origin, single);
  await checkJsonBatch(engine.origin, items);
  await checkFrameBatch(engine.origin, frame, items);
  await checkJsonBatch(allCores.origin, items);
  await checkFrameBatch(allCores.origin, frame, items);
  await streamEncrypt({ ...stream, totalBytes: settings.ndjsonBytes / 4 });

  log('warming up ...');
  // The three loads, each a URL on a server and what is POSTed there.
  const singleLoad = {
    body: singleBody,
    contentType: 'application/json',
    connections: settings.singleConnections,
    verifyBody: (body) => body.includes('"success":true'),
  };
  const jsonLoad = {
    url: (server) => `${server.origin}/api/encrypt/batch`,
    body: JSON.stringify({ items }),
    contentType: 'application/json',
    connections: settings.batchConnections,
    verifyBody: (body) => body.includes('"totalFailed":0,'),
  };
  const frameLoad = {
    url: (server) => `${server.origin}/api/encrypt/batch`,
    body: frame,
    contentType: 'application/x-svc-binary-frame',
    connections: settings.batchConnections,
    verifyBody: (body) => body.startsWith('SVCF'),
  };
  const batch = (server, load) => httpSampler(server, items.length, { ...load, url: load.url(server) });
  const figures = {
    [F.raw]: rawGcmSampler({ size: small, ms }),
    [F.core]: coreEncryptManySampler({ size: small, ms }),
    [F.rawLarge]: rawGcmSampler({ size: large, ms }),
    [F.coreLarge]: coreEncryptManySampler({ size: large, ms }),
    [F.bare]: await httpSampler(bare, 1, { ...singleLoad, url: `${bare.origin}/bare` }),
    [F.single]: await httpSampler(engine, 1, { ...singleLoad, url: `${engine.origin}/api/encrypt` }),
    [F.coreRoute]: await httpSampler(coreRoute, 1, { ...singleLoad, url: `${coreRoute.origin}/api/encrypt` }),
    // Each batch figure beside the others of its kind, so that a round's drift hits them alike.
    [F.json]: await batch(engine, jsonLoad),
    [F.jsonAll]: await batch(allCores, jsonLoad),
    [F.jsonCeiling]: await parallelHttpSampler(oneCoreEngines, items.length, jsonLoad),
    [F.frame]: await batch(engine, frameLoad),
    [F.frameAll]: await batch(allCores, frameLoad),
    [F.frameCeiling]: await parallelHttpSampler(oneCoreEngines, items.length, frameLoad),
    [F.ndjson]: async () => {
      const before = cpuMicros(engine.pid);
      const run = await streamEncrypt({ ...stream, totalBytes: settings.ndjsonBytes });
      return { rate: run.lines / run.seconds, cpu: (cpuMicros(engine.pid) - before) / run.lines };
    },
  };
  const results = await rounds(settings.rounds, figures, (round) => log(`round ${round}/${settings.rounds} done`));
  // N x the raw loop: what N cores could do with nothing but the cipher calls.
  const raw = results.get(F.raw);
  results.set(F.rawAll, { median: raw.median * CORES, samples: raw.samples.map((r) => r * CORES), cpu: raw.cpu });
  return results;
}

async function main() {
  const cores = cpus();
  log(`engine benchmark${quick ? ' (--quick smoke run: figures are not meaningful)' : ''}`);
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  log(`node ${process.version}, ${cores.length} cores (${cores[0]?.model ?? 'unknown'}), load average ${load}`);
  log(`Figures are medians of ${settings.rounds} rounds; each round samples every figure in turn, so drift in`);
  log('the machine load hits them alike. Ratios compare figures from this same run. "CPU us/item" is the CPU');
  log('time of the process doing the work (this one in process, the server over HTTP) per item; "CPU ratio"');
  log('compares it with the reference\'s (reference us/item / figure us/item), which other load disturbs less.');
  log('In process (this process): raw node:crypto AES-256-GCM (createCipheriv + setAAD + update + final +');
  log(
    `getAuthTag, pooled random nonces) and the core's ExecutionService.encryptMany on ${settings.batchItems}-item arrays.`,
  );
  log('HTTP: the engine (node engine/dist/main.js --dev) on one core (SVC_WORKERS=1) and on all cores (default');
  log(`SVC_WORKERS=${CORES}: batches of 64 items or more run on ${CORES} crypto worker threads), ${CORES} more one-core engines loaded at`);
  log('once (the connections shared among them), a bare Fastify app (one POST route, constant JSON) and a Fastify');
  log("app whose one route has the engine's schemas and calls the core's encryptOne, nothing else of the engine,");
  log('each run in their own process; the load generator (autocannon, keep-alive; single requests over');
  log(
    `${settings.singleConnections} connections, batches over ${settings.batchConnections}) runs in this process and competes with them for`,
  );
  log(`the same ${cores.length} cores (so "all cores" leaves the engine less than ${cores.length} cores). NDJSON: one streaming request at a time,`);
  log('response read concurrently.\n');

  const bare = await startBareServer();
  const coreRoute = await startBareServer('core-route-server.mjs', 'fastify core route');
  let results;
  try {
    const engine = await startEngine({ SVC_WORKERS: '1' });
    const allCores = await startEngine();
    const oneCoreEngines = [engine];
    try {
      while (oneCoreEngines.length < CORES) oneCoreEngines.push(await startEngine({ SVC_WORKERS: '1' }));
      log(`engine pid ${engine.pid} at ${engine.origin} (one core), ${allCores.pid} at ${allCores.origin} (all cores); bare Fastify pid ${bare.pid}`);
      results = await measureAll({ bare, coreRoute, engine, allCores, oneCoreEngines });
      log('PostgreSQL wire endpoint: serial round trips from one pg client vs a TCP echo server (own process)');
      const wire = await pgwireRoundTrips({
        engine,
        seconds: settings.httpSeconds,
        warmupSeconds: settings.warmupSeconds,
        roundCount: settings.rounds,
        batchItems: settings.batchItems,
        log,
      });
      results.set(F.echo, wire.echo);
      results.set(F.wire, wire.wire);
      results.set(F.wireMany, wire.wireMany);
    } finally {
      for (const oneCore of oneCoreEngines) await oneCore.stop();
      await allCores.stop();
    }
  } finally {
    await bare.stop();
    await coreRoute.stop();
  }
  const rows = report(results);

  log(`stream memory: ${(settings.streamBytes / MIB).toFixed(0)} MiB of NDJSON through a fresh engine`);
  const memory = await streamMemory({ bytes: settings.streamBytes, dataBytes: settings.streamDataBytes, log });
  rows.push([
    'stream memory: peak - start RSS',
    `${(memory.growth / MIB).toFixed(1)} MiB`,
    '-',
    '-',
    '-',
    '< 200 MiB',
    memory.growth < 200 * MIB ? 'met' : 'MISSED',
    '-',
  ]);
  rows.push([
    `stream throughput (${settings.streamDataBytes} B items)`,
    `${memory.mbPerSecond.toFixed(1)} MiB/s`,
    formatCpu(memory.cpuPerItem),
    '-',
    '-',
    '-',
    '-',
    '-',
  ]);
  // Audit overhead: a self-contained pair of engines (audit file on / off), docs/audit.md.
  log('audit overhead: JSON batch with the audit file on vs off (two engines, sampled alternately)');
  rows.push(
    ...(await auditOverhead({
      batchItems: settings.batchItems,
      dataBytes: settings.dataBytes,
      seconds: settings.httpSeconds,
      warmupSeconds: settings.warmupSeconds,
      connections: settings.batchConnections,
      roundCount: settings.rounds,
      log,
    })),
  );
  rows.push(...(await footprintRows()));
  log(`\n${table(rows)}`);
}

function footprintRows() {
  log('footprint: warm starts of the embedded default and its idle RSS, beside a bare Fastify process');
  return footprint({ starts: footprintStarts(), idleWaitMs: quick ? 17_000 : 20_000, log });
}

/** `--footprint`: the footprint rows alone. */
async function footprintMain() {
  const cores = cpus();
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  log(`engine benchmark, footprint rows only${quick ? ' (--quick smoke run: figures are not meaningful)' : ''}`);
  log(`node ${process.version}, ${cores.length} cores (${cores[0]?.model ?? 'unknown'}), load average ${load}`);
  const rows = [['figure', 'median rate', 'CPU us/item', 'reference', 'ratio', 'target', 'result', 'CPU ratio']];
  rows.push(...(await footprintRows()));
  log(`\n${table(rows)}`);
}

(footprintOnly ? footprintMain() : main()).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`benchmark failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
