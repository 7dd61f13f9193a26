// The crypto worker pool with real processes (docs/workers.md): an engine with two worker threads
// answers a key sync only once every worker holds the new key (a large batch sent right after the sync
// answers encrypts every item under it, on whichever worker), and a worker that ends abruptly is
// replaced while batches keep succeeding in full.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BINARY_FRAME_TYPE, decodeResponseFrame, encodeRequestFrame } from '../../engine/src/http/codecs/binary-frame.js';
import { engineClient, eventually, keyVersionOf } from '../src/engine-client.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { POLICIES, POLICY_NAME, testBootstrap } from '../src/test-policies.js';

const TENANT = 'tenant-workers-4f2a';
/** Four slices of 256 items: enough to go to the workers and to spread over both. */
const BATCH = 1024;

let engine: RunningEngine;
let client: ReturnType<typeof engineClient>;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tests assert on whatever the engine answered.
async function postJson(path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${engine.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: await res.json() };
}

async function metrics(): Promise<string> {
  return (await fetch(`${engine.opsUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(name.length + 1));
}

function items(prefix: string) {
  return Array.from({ length: BATCH }, (_, i) => ({ data: `${prefix}-${i}`, policyCode: POLICIES.random }));
}

beforeAll(async () => {
  engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_WORKERS: '2', SVC_TEST_HOOKS: 'true', SVC_ALLOW_RAW_KEY_MATERIAL: 'true', SVC_AUDIT_FLUSH_INTERVAL_MS: '50' },
  });
  client = engineClient(engine.url, TENANT, engine.opsUrl);
  // Syncs need an identity; the hub named here is never reached by anything the tests check.
  const registered = await client.ops('POST', '/runtime/identity', { hubUrl: 'http://127.0.0.1:9', tenantId: TENANT });
  expect(registered.status).toBe(200);
  await eventually('both workers are idle', async () => metric(await metrics(), 'svc_workers{state="idle"}') === 2);
});

afterAll(async () => {
  await engine?.dispose();
});

describe('an engine on two worker threads', () => {
  it('answers a key sync only once every worker encrypts under the new key version', async () => {
    const slicesBefore = metric(await metrics(), 'svc_worker_slices_total');
    for (let version = 2; version <= 6; version++) {
      const material = Buffer.alloc(32, version).toString('base64');
      const synced = await client.ops('POST', '/cache/keys/sync', {
        key: { alias: 'it-gcm', version, algorithm: 'AES-256-GCM', status: 'ACTIVE', material },
      });
      expect(synced.status).toBe(200);
      // Sent the moment the sync answered: every slice, on either worker, must already see the new version.
      const [json, frame] = await Promise.all([
        postJson('/api/encrypt/batch', { items: items(`json-v${version}`) }),
        fetch(`${engine.url}/api/encrypt/batch`, {
          method: 'POST',
          headers: { 'content-type': BINARY_FRAME_TYPE },
          body: encodeRequestFrame('encrypt', items(`frame-v${version}`)),
          signal: AbortSignal.timeout(30_000),
        }).then(async (res) => ({ status: res.status, frame: decodeResponseFrame(Buffer.from(await res.arrayBuffer())) })),
      ]);
      expect(json.status).toBe(200);
      expect(json.body.totalSuccess).toBe(BATCH);
      // Every result in its item's place (slices travel as columns and come back in order).
      expect(json.body.results.map((r: { originalData: string }) => r.originalData)).toEqual(items(`json-v${version}`).map((i) => i.data));
      expect(new Set(json.body.results.map((r: { encryptedData: string }) => keyVersionOf(r.encryptedData)))).toEqual(
        new Set([version]),
      );
      expect(frame.status).toBe(200);
      expect(frame.frame.totals.totalSuccess).toBe(BATCH);
      expect(new Set(frame.frame.items.map((item) => keyVersionOf(item.data.toString('latin1'))))).toEqual(new Set([version]));

      // And back, on the workers too: every value as it was sent.
      const decrypted = await postJson('/api/decrypt/batch', {
        items: json.body.results.map((r: { encryptedData: string }) => ({ data: r.encryptedData })),
      });
      expect(decrypted.body.totalSuccess).toBe(BATCH);
      expect(decrypted.body.results.map((r: { decryptedData: string }) => r.decryptedData)).toEqual(items(`json-v${version}`).map((i) => i.data));
    }
    const after = await metrics();
    // The batches did run on the workers, and every encryption they made was counted.
    expect(metric(after, 'svc_worker_slices_total')).toBeGreaterThanOrEqual(slicesBefore + 5 * 12);
    for (let version = 2; version <= 6; version++) {
      expect(metric(after, `svc_key_encryptions_total{alias="it-gcm",version="${version}"}`)).toBe(2 * BATCH);
      expect(metric(after, `svc_key_decryptions_total{alias="it-gcm",version="${version}"}`)).toBe(BATCH);
    }
  });

  it('answers a JSON batch from the workers with the document the main thread writes, and audits it once', async () => {
    // Deterministic encryption, failures of three kinds: the same items give the same results on either path.
    const mixed = Array.from({ length: 128 }, (_, i) =>
      i % 5 === 1
        ? { data: `x-${i}`, policyCode: 'NO_SUCH_POLICY' }
        : i % 5 === 3
          ? { policyCode: POLICIES.deterministic }
          : { data: `det-${i}`, policyCode: POLICIES.deterministic },
    );
    const slicesBefore = metric(await metrics(), 'svc_worker_slices_total');
    const whole = await postJson('/api/encrypt/batch', { items: mixed });
    expect(metric(await metrics(), 'svc_worker_slices_total')).toBeGreaterThan(slicesBefore);
    // Batches under the pool's threshold run on the main thread.
    const parts = await Promise.all([0, 32, 64, 96].map((at) => postJson('/api/encrypt/batch', { items: mixed.slice(at, at + 32) })));
    expect(whole.status).toBe(200);
    const { totalProcessingTime: _t, results, ...totals } = whole.body;
    expect(results).toEqual(parts.flatMap((p) => p.body.results));
    expect(totals).toEqual({ success: false, transportMode: 'json', totalProcessed: 128, totalSuccess: 77, totalFailed: 51 });
    expect(Object.keys(results[0])).toEqual(['success', 'code', 'message', 'originalData', 'encryptedData', 'policyCode']);

    const requestId = (await fetch(`${engine.url}/api/encrypt/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ items: mixed }),
    })).headers.get('x-request-id');
    let event: { items: unknown; itemErrors: unknown; policyCodes: string[]; outcome: { result: string } } | undefined;
    await eventually('the batch is in the audit file', async () => {
      const lines = (await readFile(join(engine.dataDir, 'audit.log'), 'utf8')).split('\n').filter((l) => l !== '');
      const events = lines.map((l) => JSON.parse(l)).filter((e) => e.requestId === requestId);
      event = events[0];
      return events.length === 1;
    });
    expect(event?.items).toEqual({ total: 128, succeeded: 77, failed: 51 });
    expect(event?.itemErrors).toEqual({ POLICY_NOT_FOUND: 26, INVALID_REQUEST: 25 });
    expect(event?.outcome.result).toBe('partial');
    expect(new Set(event?.policyCodes)).toEqual(new Set([POLICIES.deterministic, 'NO_SUCH_POLICY']));
  });

  it('answers binary-frame batches (encrypt, decrypt, rewrap) from the workers with the items the main thread writes', async () => {
    // Slices travel to the workers as the frame's own bytes: raw non-UTF-8 data, policies by code and by
    // name, repeated and changing references and failed items must come back as on the main thread.
    const plain = Array.from({ length: 200 }, (_, i) => {
      const data = i % 7 === 0 ? Buffer.from([0xff, 0xfe, i & 0xff, 0x00]) : Buffer.from(`frame-${i}-${'é'.repeat(i % 5)}`);
      if (i % 11 === 4) return { data, policyCode: 'NO_SUCH_POLICY' };
      if (i % 13 === 6) return { data, policyName: POLICY_NAME, policyVersion: 1 };
      return { data, policyCode: i < 120 ? POLICIES.deterministic : POLICIES.random };
    });
    const post = async (operation: 'encrypt' | 'decrypt' | 'rewrap', list: readonly { data: Uint8Array | string }[]) => {
      const res = await fetch(`${engine.url}/api/${operation}/batch`, {
        method: 'POST',
        headers: { 'content-type': BINARY_FRAME_TYPE },
        body: encodeRequestFrame(operation, list as Parameters<typeof encodeRequestFrame>[1]),
        signal: AbortSignal.timeout(30_000),
      });
      expect(res.status).toBe(200);
      return decodeResponseFrame(Buffer.from(await res.arrayBuffer()));
    };
    // Under the pool's threshold (64 items) a batch runs on the main thread.
    const inParts = async (operation: 'encrypt' | 'decrypt' | 'rewrap', list: readonly { data: Uint8Array | string }[]) => {
      const parts = [];
      for (let at = 0; at < list.length; at += 50) parts.push(await post(operation, list.slice(at, at + 50)));
      return parts.flatMap((part) => part.items);
    };

    const slicesBefore = metric(await metrics(), 'svc_worker_slices_total');
    const encrypted = await post('encrypt', plain);
    expect(metric(await metrics(), 'svc_worker_slices_total')).toBeGreaterThan(slicesBefore);
    const mainEncrypted = await inParts('encrypt', plain);
    expect(encrypted.items.map((item) => [item.code, item.status, item.policyCode])).toEqual(
      mainEncrypted.map((item) => [item.code, item.status, item.policyCode]),
    );
    // Deterministic ciphertexts and failure messages are the same bytes on either path.
    for (const [i, item] of encrypted.items.entries()) {
      if (item.code !== 1000 || item.policyCode === POLICIES.deterministic) expect(item.data).toEqual(mainEncrypted[i]?.data);
    }
    expect(encrypted.totals.totalFailed).toBe(plain.filter((p) => 'policyCode' in p && p.policyCode === 'NO_SUCH_POLICY').length);

    const sealed = encrypted.items.map((item, i) => ({ data: item.code === 1000 ? item.data.toString('latin1') : `not-a-ciphertext-${i}` }));
    sealed[3] = { data: `${(sealed[3] as { data: string }).data.slice(0, -2)}AA` }; // tampered
    const decrypted = await post('decrypt', sealed);
    expect(decrypted.items.map((item) => [item.code, item.status, item.policyCode, item.data.toString('hex')])).toEqual(
      (await inParts('decrypt', sealed)).map((item) => [item.code, item.status, item.policyCode, item.data.toString('hex')]),
    );
    for (const [i, item] of decrypted.items.entries()) {
      if (item.code === 1000) expect(item.data).toEqual(Buffer.from((plain[i] as { data: Uint8Array }).data));
    }

    const rewrapped = await post('rewrap', sealed);
    expect(rewrapped.items.map((item) => [item.code, item.status, item.policyCode])).toEqual(
      (await inParts('rewrap', sealed)).map((item) => [item.code, item.status, item.policyCode]),
    );
    // Already under the newest version: rewrap gives each ciphertext back unchanged.
    for (const [i, item] of rewrapped.items.entries()) if (item.code === 1000) expect(item.data.toString('latin1')).toBe(sealed[i]?.data);
  });

  it('answers a sync of 30,000 policies, posted to the workers in parts, only once both workers encrypt under them', async () => {
    const count = 30_000;
    const policies = Array.from({ length: count }, (_, i) => ({
      policyCode: `BULK_${i}`,
      policyName: `bulk-${i}`,
      policyVersion: 1,
      algorithm: 'AES-256-GCM',
      keyAlias: 'it-gcm',
      status: 'ACTIVE',
    }));
    const sync = client.ops('POST', '/cache/policies/sync', { policies, runtimeVersion: 'bulk' });
    // Batches while the snapshot travels to the workers: each runs whole under one snapshot, old or new.
    let synced: Awaited<typeof sync> | undefined;
    void sync.then((answer) => (synced = answer));
    const during: Promise<{ status: number; body: { totalSuccess: number } }>[] = [];
    while (synced === undefined) {
      during.push(postJson('/api/encrypt/batch', { items: items(`during-${during.length}`) }));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(synced.status).toBe(200);
    expect(synced.body).toEqual({ success: true, count });
    for (const answer of await Promise.all(during)) expect(answer.body.totalSuccess).toBe(BATCH);
    // Sent the moment the sync answered: every slice, on either worker, finds the last policies synced.
    const bulk = Array.from({ length: BATCH }, (_, i) => ({ data: `bulk-${i}`, policyCode: `BULK_${count - 1 - (i % 16)}` }));
    const after = await postJson('/api/encrypt/batch', { items: bulk });
    expect(after.status).toBe(200);
    expect(after.body.totalSuccess).toBe(BATCH);
    expect(after.body.results[BATCH - 1].policyCode).toBe(`BULK_${count - 16}`);
  });

  it('replaces a worker that ends abruptly, and batches in flight meanwhile still succeed in full', async () => {
    const replacedBefore = metric(await metrics(), 'svc_workers_replaced_total');
    const inFlight = Array.from({ length: 6 }, (_, n) => postJson('/api/encrypt/batch', { items: items(`kill-${n}`) }));
    // Frame slices travel as bytes: a slice run again on another worker is posted again from them.
    const framesInFlight = Array.from({ length: 2 }, (_, n) =>
      fetch(`${engine.url}/api/encrypt/batch`, {
        method: 'POST',
        headers: { 'content-type': BINARY_FRAME_TYPE },
        body: encodeRequestFrame('encrypt', items(`kill-frame-${n}`)),
        signal: AbortSignal.timeout(30_000),
      }).then(async (res) => ({ status: res.status, frame: decodeResponseFrame(Buffer.from(await res.arrayBuffer())) })),
    );
    engine.signal('SIGUSR2');
    const answers = await Promise.all(inFlight);
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.body.totalSuccess).toBe(BATCH);
    }
    for (const answer of await Promise.all(framesInFlight)) {
      expect(answer.status).toBe(200);
      expect(answer.frame.totals.totalSuccess).toBe(BATCH);
    }
    await eventually('the ended worker is replaced', async () => {
      const text = await metrics();
      return metric(text, 'svc_workers_replaced_total') === replacedBefore + 1 && metric(text, 'svc_workers{state="idle"}') === 2;
    });
    expect(engine.output()).toContain('crypto worker ended: replacing it');
    // The replacement holds the current snapshot (key version 6 from the sync above).
    const after = await postJson('/api/encrypt/batch', { items: items('after-kill') });
    expect(after.body.totalSuccess).toBe(BATCH);
    expect(new Set(after.body.results.map((r: { encryptedData: string }) => keyVersionOf(r.encryptedData)))).toEqual(new Set([6]));
  });

  it('drains on SIGTERM: every batch answers in full or is refused whole, never in part', async () => {
    const inFlight = Array.from({ length: 6 }, (_, n) =>
      postJson('/api/encrypt/batch', { items: items(`drain-${n}`) }).catch(() => ({ status: 0, body: undefined })),
    );
    await Promise.race(inFlight);
    await engine.stop();
    const answers = await Promise.all(inFlight);
    expect(answers[0]?.status).toBe(200);
    for (const answer of answers) {
      // Answered before the stop, drained, or refused (503 SHUTTING_DOWN / connection closed): never a partial batch.
      if (answer.status === 200) expect(answer.body.totalSuccess).toBe(BATCH);
      else expect([0, 503]).toContain(answer.status);
    }
  });
});
