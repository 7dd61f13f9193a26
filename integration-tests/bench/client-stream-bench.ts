// Streams 1 GiB of NDJSON (SVC_BENCH_STREAM_BYTES to change it) through @svc/client's encryptStream into
// a real engine process and reads every answer line, sampling the resident memory of both processes.
// Flat memory means the peaks stay near the start values whatever the stream's length: the client reads
// items from the generator only as the connection takes them, and answers only as the loop consumes them.
//   npm run bench:client-stream      (SVC_BENCH_STREAM_BYTES=134217728 npm run bench:client-stream: 128 MiB)
import { EngineClient } from '../../client/src/index.js';
import { startEngine } from '../src/engine-process.js';

const TOTAL = Number(process.env.SVC_BENCH_STREAM_BYTES ?? 1024 ** 3);
const VALUE_BYTES = 4096;
const MiB = 1024 * 1024;

async function engineRss(opsUrl: string): Promise<number> {
  const text = await fetch(`${opsUrl}/metrics`).then((r) => r.text());
  const line = text.split('\n').find((l) => l.startsWith('svc_process_resident_memory_bytes '));
  return Number(line?.split(' ')[1] ?? NaN);
}

const engine = await startEngine({ env: { SVC_AUDIT_FILE: 'off', SVC_LOG_LEVEL: 'warn' } });
try {
  const client = new EngineClient(engine.url);
  // Distinct values without holding them: a counter in a fixed-size filler.
  const filler = 'x'.repeat(VALUE_BYTES - 16);
  let sent = 0;
  let lines = 0;
  async function* source() {
    while (sent < TOTAL) {
      const data = `${String(lines).padStart(16, '0')}${filler}`;
      const item = { data, policyCode: lines % 2 === 0 ? 'DEMO_RANDOM' : 'DEMO_DETERMINISTIC' };
      sent += data.length + 48; // the JSON line around it
      lines++;
      yield item;
    }
  }

  const clientSamples: number[] = [];
  const engineSamples: number[] = [];
  const sample = async () => {
    clientSamples.push(process.memoryUsage().rss);
    engineSamples.push(await engineRss(engine.opsUrl));
  };
  await sample();
  const started = performance.now();
  const timer = setInterval(() => void sample(), 500);
  let answered = 0;
  let answerBytes = 0;
  let failed = 0;
  try {
    for await (const result of client.encryptStream(source())) {
      answered++;
      if (result.success) answerBytes += result.data.length;
      else failed++;
    }
  } finally {
    clearInterval(timer);
  }
  const seconds = (performance.now() - started) / 1000;
  await sample();

  const peakClient = process.resourceUsage().maxRSS * 1024;
  const mib = (n: number) => `${(n / MiB).toFixed(0)} MiB`;
  const quartiles = (xs: number[]) => [0, 0.25, 0.5, 0.75, 1].map((q) => mib(xs[Math.min(xs.length - 1, Math.floor(q * (xs.length - 1)))] ?? NaN)).join(' / ');
  console.log(`stream: ${(sent / MiB).toFixed(0)} MiB in ${lines} lines (${VALUE_BYTES}-byte values), ${answered} answers (${failed} failed), ${(answerBytes / MiB).toFixed(0)} MiB of ciphertext`);
  console.log(`time: ${seconds.toFixed(1)} s, ${(sent / MiB / seconds).toFixed(1)} MiB/s sent`);
  console.log(`client RSS: start ${mib(clientSamples[0] ?? NaN)}, peak ${mib(peakClient)}; at 0/25/50/75/100 % of the run: ${quartiles(clientSamples)}`);
  console.log(`engine RSS: start ${mib(engineSamples[0] ?? NaN)}, peak ${mib(Math.max(...engineSamples))}; at 0/25/50/75/100 %: ${quartiles(engineSamples)}`);
  if (answered !== lines || failed > 0) {
    console.error('not every line was answered with success');
    process.exitCode = 1;
  }
} finally {
  await engine.dispose();
}
