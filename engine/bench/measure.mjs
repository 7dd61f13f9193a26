// Measurement helpers for the benchmark: repeat a measurement, keep every sample, report the median.
// The machine is shared and noisy, so no single run is trusted and figures are always read as ratios
// against a reference taken in the same run. Each sample is a rate and the CPU time the working process
// spent per item: throughput suffers when other processes take the cores, CPU per item much less.

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Samples every figure once per round, for `count` rounds, in the same order each round, so that slow
 * drift in the machine's load hits all figures alike instead of whichever happened to run last.
 * `figures` maps a name to an async sampler returning { rate, cpu } (cpu: microseconds per item);
 * returns name -> { median, samples, cpu } with the median rate, every rate, and the median cpu.
 */
export async function rounds(count, figures, onRound = () => {}) {
  const samples = new Map(Object.keys(figures).map((name) => [name, []]));
  for (let round = 1; round <= count; round++) {
    for (const [name, sample] of Object.entries(figures)) samples.get(name).push(await sample());
    onRound(round);
  }
  return new Map(
    [...samples].map(([name, s]) => {
      const rates = s.map((x) => x.rate);
      return [name, { median: median(rates), samples: rates, cpu: median(s.map((x) => x.cpu)) }];
    }),
  );
}

/**
 * Calls `step` (which does `perStep` operations) until at least `ms` milliseconds have passed;
 * returns operations per second and this process's CPU microseconds per operation. Timing whole steps
 * keeps the clock out of the inner loop.
 */
export function rateFor(ms, perStep, step) {
  let ops = 0;
  const cpu = process.cpuUsage();
  const start = process.hrtime.bigint();
  const until = start + BigInt(Math.round(ms * 1e6));
  let now = start;
  while (now < until) {
    step();
    ops += perStep;
    now = process.hrtime.bigint();
  }
  const used = process.cpuUsage(cpu);
  return { rate: ops / (Number(now - start) / 1e9), cpu: (used.user + used.system) / ops };
}

export function formatRate(value) {
  if (value >= 1e6) return `${(value / 1e6).toFixed(2)} M`;
  if (value >= 1e3) return `${(value / 1e3).toFixed(1)} k`;
  return value.toFixed(1);
}

export function formatCpu(micros) {
  return micros >= 100 ? micros.toFixed(0) : micros.toFixed(2);
}

export function formatSamples(samples) {
  return samples.map(formatRate).join(' / ');
}

/** Renders rows of cells as an aligned plain-text table (first row is the heading). */
export function table(rows) {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => String(r[c]).length)));
  const line = (r) => r.map((cell, c) => String(cell).padEnd(widths[c])).join('  ');
  return [line(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}
