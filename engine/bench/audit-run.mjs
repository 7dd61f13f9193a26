// Audit overhead: the same JSON encrypt batch against two engines started alike, one auditing to its
// file (the default) and one with SVC_AUDIT_FILE=off, sampled in alternation so machine load hits both
// alike; reports the ratio (target: auditing keeps at least 90% of batch throughput, docs/audit.md).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { postLoad } from './http-load.mjs';
import { POLICY, plaintexts } from './in-process.mjs';
import { formatCpu, formatRate, rounds } from './measure.mjs';
import { cpuMicros, startEngine } from './processes.mjs';

export const AUDIT_TARGET = 0.9;

export async function auditOverhead({ batchItems, dataBytes, seconds, warmupSeconds, connections, roundCount, log }) {
  const items = plaintexts(batchItems, dataBytes).map((data) => ({ data, policyCode: POLICY }));
  const body = JSON.stringify({ items });
  const on = await startEngine();
  const off = await startEngine({ SVC_AUDIT_FILE: 'off' });
  try {
    const sampler = async (engine) => {
      const options = {
        url: `${engine.origin}/api/encrypt/batch`,
        body,
        contentType: 'application/json',
        connections,
        verifyBody: (text) => text.includes('"totalFailed":0,'),
      };
      await postLoad({ ...options, seconds: warmupSeconds });
      return async () => {
        const before = cpuMicros(engine.pid);
        const { rate, requests } = await postLoad({ ...options, seconds });
        return { rate: rate * items.length, cpu: (cpuMicros(engine.pid) - before) / (requests * items.length) };
      };
    };
    const results = await rounds(roundCount, { on: await sampler(on), off: await sampler(off) }, (round) =>
      log(`audit round ${round}/${roundCount} done`),
    );
    // The figure only counts if the audited engine really wrote one event per batch.
    await new Promise((r) => setTimeout(r, 500));
    const lines = readFileSync(join(on.dataDir, 'audit.log'), 'utf8').split('\n').filter((l) => l.includes('"operation":"encrypt"'));
    if (lines.length === 0) throw new Error('the audited engine wrote no audit events');
    const withAudit = results.get('on');
    const without = results.get('off');
    const ratio = withAudit.median / without.median;
    log(`  audit on: ${formatRate(withAudit.median)} items/s, off: ${formatRate(without.median)} items/s, ${lines.length} events written`);
    const name = `engine JSON batch x${batchItems}, audit file on`;
    return [
      [
        name,
        `${formatRate(withAudit.median)} items/s`,
        formatCpu(withAudit.cpu),
        'same, audit off',
        ratio.toFixed(2),
        `>= ${AUDIT_TARGET.toFixed(2)}`,
        ratio >= AUDIT_TARGET ? 'met' : 'MISSED',
        (without.cpu / withAudit.cpu).toFixed(2),
      ],
    ];
  } finally {
    await on.stop();
    await off.stop();
  }
}
