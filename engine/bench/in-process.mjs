// In-process figures: the platform's AES-256-GCM limit (raw node:crypto, no engine code) and the
// engine core's encryptMany on 1,000-item arrays (no HTTP). Both run in the benchmark process itself;
// the core is the built engine from engine/dist.
import { createCipheriv, createSecretKey, randomBytes, randomFillSync } from 'node:crypto';
import { generateDevBootstrap, parseBootstrap } from '../dist/core/bootstrap.js';
import { ExecutionService } from '../dist/core/execution-service.js';
import { RuntimeCache } from '../dist/core/runtime-cache.js';
import { rateFor } from './measure.mjs';

export const POLICY = 'DEMO_RANDOM';
const NONCE = 12;
// Same shape as the engine's AAD: `hub:<code>:` followed by the 6-byte envelope header.
const AAD = Buffer.concat([Buffer.from(`hub:${POLICY}:`), Buffer.alloc(6, 1)]);

/** Printable plaintexts of exactly `size` bytes, different per item. */
export function plaintexts(count, size) {
  const out = new Array(count);
  for (let i = 0; i < count; i++) out[i] = randomBytes(size).toString('base64').slice(0, size);
  return out;
}

/**
 * Raw createCipheriv + setAAD + update + final + getAuthTag, nonces from a pooled randomFillSync.
 * Returns a sampler: each call runs the loop for `ms` and returns items per second.
 */
export function rawGcmSampler({ size, ms }) {
  const key = createSecretKey(randomBytes(32));
  const plaintext = Buffer.from(plaintexts(1, size)[0]);
  const pool = Buffer.allocUnsafe(NONCE * 4096);
  let offset = pool.length;
  let sink = 0;
  const step = () => {
    for (let i = 0; i < 1000; i++) {
      if (offset === pool.length) {
        randomFillSync(pool);
        offset = 0;
      }
      const cipher = createCipheriv('aes-256-gcm', key, pool.subarray(offset, offset + NONCE));
      offset += NONCE;
      cipher.setAAD(AAD);
      sink += cipher.update(plaintext).length + cipher.final().length + cipher.getAuthTag().length;
    }
  };
  rateFor(ms / 2, 1000, step); // warm-up
  if (sink === 0) throw new Error('raw GCM loop produced nothing');
  return () => rateFor(ms, 1000, step);
}

/** An execution service over a runtime cache fed the dev bootstrap, as `--dev` does. */
export function devExecutionService() {
  const cache = new RuntimeCache();
  cache.replace(parseBootstrap(generateDevBootstrap()));
  return new ExecutionService(cache, { maxBatchItems: 10_000, maxDataBytes: 4 * 1024 * 1024 });
}

/** A sampler of ExecutionService.encryptMany on 1,000-item arrays; fails on any failed item. */
export function coreEncryptManySampler({ size, ms }) {
  const service = devExecutionService();
  const items = plaintexts(1000, size).map((data) => ({ data, policyCode: POLICY }));
  const step = () => {
    const outcomes = service.encryptMany(items);
    for (const outcome of outcomes) {
      if (!outcome.ok) throw new Error(`core encryptMany failed an item: ${outcome.error.message}`);
    }
  };
  rateFor(ms / 2, items.length, step);
  const check = service.decryptMany(service.encryptMany(items).map((o) => ({ data: o.data })));
  check.forEach((o, i) => {
    if (!o.ok || o.data !== items[i].data) throw new Error('core round trip does not give the plaintext back');
  });
  return () => rateFor(ms, items.length, step);
}
