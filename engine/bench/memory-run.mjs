// Stream memory: pushes a large NDJSON body (generated on the fly) through a fresh engine process while
// reading its response, sampling the engine's RSS every 250 ms. A streaming transport must stay flat:
// what it holds is bounded by a line and the socket buffers, not by the size of the stream.

import { POLICY } from './in-process.mjs';
import { streamEncrypt } from './ndjson-client.mjs';
import { cpuMicros, rssBytes, startEngine } from './processes.mjs';

const MIB = 1024 * 1024;
const mib = (bytes) => `${(bytes / MIB).toFixed(1)} MiB`;

export async function streamMemory({ bytes, dataBytes, log }) {
  const engine = await startEngine();
  try {
    const samples = [];
    const start = rssBytes(engine.pid);
    const cpuBefore = cpuMicros(engine.pid);
    samples.push(start);
    const timer = setInterval(() => samples.push(rssBytes(engine.pid)), 250);
    let run;
    try {
      run = await streamEncrypt({ origin: engine.origin, totalBytes: bytes, dataBytes, policyCode: POLICY });
    } finally {
      clearInterval(timer);
    }
    const end = rssBytes(engine.pid);
    const cpuPerItem = (cpuMicros(engine.pid) - cpuBefore) / run.lines;
    samples.push(end);
    const peak = Math.max(...samples);
    const step = Math.max(1, Math.floor(samples.length / 10));
    const trace = samples.filter((_, i) => i % step === 0).map((s) => (s / MIB).toFixed(0));
    const mbPerSecond = run.bytes / MIB / run.seconds;
    log(
      `  sent ${mib(run.bytes)} (${run.lines} lines of ${dataBytes} B data), received ${mib(run.received)} ` +
        `in ${run.seconds.toFixed(1)} s: ${mbPerSecond.toFixed(1)} MiB/s in, ${(run.lines / run.seconds / 1e3).toFixed(1)} k items/s`,
    );
    log(`  engine RSS: start ${mib(start)}, peak ${mib(peak)}, end ${mib(end)} (${samples.length} samples)`);
    log(`  RSS trace (MiB): ${trace.join(' ')}`);
    return { start, peak, end, growth: peak - start, mbPerSecond, cpuPerItem };
  } finally {
    await engine.stop();
  }
}
