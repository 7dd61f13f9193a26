// Per key version usage as operators and the hub see it: counts, the algorithm's safe limit and a
// flag well before it. AES-GCM with random 96-bit nonces must stay below 2^32 encryptions per key
// (NIST SP 800-38D); we flag at 2^31 so a rotation happens long before the bound.
import type { Algorithm } from '../core/aead.js';
import type { RuntimeCache } from '../core/runtime-cache.js';
import { keyId } from '../core/runtime-merge.js';

export const GCM_ENCRYPTION_LIMIT = 2 ** 32;
export const GCM_WARNING_THRESHOLD = 2 ** 31;

export interface KeyUsage {
  readonly alias: string;
  readonly version: number;
  /** Absent when the key version is no longer in the cache (its counters are still reported). */
  readonly algorithm: Algorithm | null;
  readonly encryptions: number;
  readonly decryptions: number;
  /** True once a GCM key reaches the warning threshold: rotate it. */
  readonly nearLimit: boolean;
}

/**
 * Every key version's usage, by alias and version. It runs at every heartbeat, state flush and metrics
 * scrape, over every key version: plain loops, and the order kept by the counters until a version is added.
 */
export function usageReport(cache: RuntimeCache, threshold = GCM_WARNING_THRESHOLD): KeyUsage[] {
  const algorithms = new Map<string, Algorithm>();
  for (const k of cache.current.keys) algorithms.set(keyId(k), k.algorithm);
  const report: KeyUsage[] = [];
  for (const cell of cache.counters.sorted()) {
    const { alias, version, encryptions, decryptions } = cell;
    const algorithm = algorithms.get(keyId(cell)) ?? null;
    report.push({ alias, version, encryptions, decryptions, algorithm, nearLimit: algorithm === 'AES-256-GCM' && encryptions >= threshold });
  }
  return report;
}
