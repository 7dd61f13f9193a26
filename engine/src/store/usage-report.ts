// Per key version usage as operators and the hub see it: counts, the algorithm's safe limit and a
// flag well before it. AES-GCM with random 96-bit nonces must stay below 2^32 encryptions per key
// (NIST SP 800-38D); we flag at 2^31 so a rotation happens long before the bound.
import type { Algorithm } from '../core/aead.js';
import type { RuntimeCache } from '../core/runtime-cache.js';

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

export function usageReport(cache: RuntimeCache, threshold = GCM_WARNING_THRESHOLD): KeyUsage[] {
  const algorithms = new Map(cache.current.keys.map((k) => [`${k.alias}\u0000${k.version}`, k.algorithm]));
  return cache.counters
    .entries()
    .map(({ reserved: _reserved, ...entry }) => {
      const algorithm = algorithms.get(`${entry.alias}\u0000${entry.version}`) ?? null;
      return { ...entry, algorithm, nearLimit: algorithm === 'AES-256-GCM' && entry.encryptions >= threshold };
    })
    .sort((a, b) => a.alias.localeCompare(b.alias) || a.version - b.version);
}
