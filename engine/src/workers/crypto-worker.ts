// A crypto worker thread: holds the snapshots the main thread sent it (by generation) and runs slices
// of batches through the same ExecutionService the main thread uses, so every rule stays in the core.
// It never touches the network, the store or the audit trail; it counts what it did and reports the
// counts with each slice so the main thread's usage counters (and reservations) stay complete.
import { parentPort, workerData } from 'node:worker_threads';
import { AuditSummary } from '../core/audit.js';
import { EngineError } from '../core/errors.js';
import { ExecutionService, type ItemOutcome } from '../core/execution-service.js';
import { decodeFrameItems, encodeResultItems } from '../http/codecs/binary-frame.js';
import { frameResults, resultObject } from '../http/batch-results.js';
import type { KeyRecord, PolicyRecord } from '../core/records.js';
import { RuntimeSnapshot } from '../core/runtime-snapshot.js';
import { UsageCounters } from '../core/usage-counters.js';
import { type FrameSlice, type FromWorker, itemsOf, type JsonSlice, packSuccesses, type ToWorker, type UsageDelta, type WorkerInit } from './protocol.js';

const port = parentPort;
if (!port) throw new Error('crypto-worker.ts runs as a worker thread only');
const { limits } = workerData as WorkerInit;

// Local cells only count; reservations are the main thread's (it hears of every count in `usage`).
const counters = new UsageCounters();
const snapshots = new Map<number, RuntimeSnapshot>();
/** Records of snapshots still arriving in parts, and the slices of batches that wait for them. */
const arriving = new Map<number, { policies: PolicyRecord[]; keys: KeyRecord[]; waiting: ToWorker[] }>();
const reported = new Map<string, { encryptions: number; decryptions: number }>();

function usageSince(): UsageDelta[] {
  const out: UsageDelta[] = [];
  for (const entry of counters.entries()) {
    const id = `${entry.alias}\u0000${entry.version}`;
    const last = reported.get(id) ?? { encryptions: 0, decryptions: 0 };
    const encryptions = entry.encryptions - last.encryptions;
    const decryptions = entry.decryptions - last.decryptions;
    if (encryptions === 0 && decryptions === 0) continue;
    reported.set(id, { encryptions: entry.encryptions, decryptions: entry.decryptions });
    out.push({ alias: entry.alias, version: entry.version, encryptions, decryptions });
  }
  return out;
}

function toWire(outcome: unknown): unknown {
  const failure = outcome as { ok?: boolean; error?: unknown; policyCode?: string };
  if (failure.ok === false && failure.error instanceof EngineError) {
    return { ok: false, policyCode: failure.policyCode, code: failure.error.code, message: failure.error.message };
  }
  return outcome;
}

/** A JSON batch slice as text, in the contract's field order (what the main thread would write). */
function jsonSlice(
  operation: NonNullable<Extract<ToWorker, { type: 'run' }>['json']>,
  outcomes: ItemOutcome[],
  items: readonly unknown[],
): JsonSlice {
  let succeeded = 0;
  const parts = new Array<string>(outcomes.length);
  for (let i = 0; i < outcomes.length; i++) {
    const outcome = outcomes[i] as ItemOutcome;
    if (outcome.ok) succeeded++;
    parts[i] = JSON.stringify(resultObject(operation.operation, outcome, items[i]));
  }
  let audit;
  if (operation.audit) {
    const summary = new AuditSummary(operation.operation);
    summary.addAll(outcomes, items);
    audit = summary.facts();
  }
  const text = parts.join(',');
  const bytes = Buffer.allocUnsafeSlow(Buffer.byteLength(text, 'utf8'));
  bytes.write(text, 0, 'utf8');
  return { bytes, succeeded, audit };
}

/** A binary-frame batch slice as encoded result items, in memory of its own to transfer. */
function frameSlice(
  frame: NonNullable<Extract<ToWorker, { type: 'run' }>['frame']>,
  outcomes: ItemOutcome[],
  items: readonly unknown[],
): FrameSlice {
  const summary = frame.audit ? new AuditSummary(frame.operation) : undefined;
  const results = frameResults(frame.operation, outcomes, items, summary);
  let succeeded = 0;
  for (const result of results) if (result.ok) succeeded++;
  return { bytes: encodeResultItems(results), succeeded, audit: summary?.facts() };
}

/** A slice's items: as posted, rebuilt from their columns, or read from the frame bytes they were packed in. */
function sliceItems(message: Extract<ToWorker, { type: 'run' }>): readonly unknown[] {
  const { packed, shared, frame, items } = message;
  if (packed && frame) {
    const bytes = Buffer.from(packed.bytes.buffer, packed.bytes.byteOffset, packed.bytes.byteLength);
    return decodeFrameItems(frame.operation, bytes, packed.count);
  }
  if (shared && !packed && !items) return itemsOf(shared);
  if (items && !packed && !shared) return items;
  throw new Error('a slice came without its items');
}

function post(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  port?.postMessage(message, transfer);
}

function receive(message: ToWorker): void {
  switch (message.type) {
    case 'snapshot-part': {
      const parts = arriving.get(message.generation) ?? { policies: [], keys: [], waiting: [] };
      arriving.set(message.generation, parts);
      for (const policy of message.policies) parts.policies.push(policy);
      for (const key of message.keys) parts.keys.push(key);
      return;
    }
    case 'snapshot': {
      // Installed synchronously (keys imported now): a slice posted after it finds it, since messages
      // on one port arrive in order.
      const parts = arriving.get(message.generation);
      arriving.delete(message.generation);
      const { content } = message;
      const whole = parts ? { ...content, policies: [...parts.policies, ...content.policies], keys: [...parts.keys, ...content.keys] } : content;
      snapshots.set(message.generation, RuntimeSnapshot.of(whole, counters));
      post({ type: 'installed', generation: message.generation });
      for (const waiting of parts?.waiting ?? []) receive(waiting);
      return;
    }
    case 'release':
      for (const generation of message.generations) {
        snapshots.delete(generation);
        arriving.delete(generation);
      }
      return;
    case 'run': {
      const snapshot = snapshots.get(message.generation);
      const parts = arriving.get(message.generation);
      if (!snapshot && parts) {
        parts.waiting.push(message);
        return;
      }
      if (!snapshot) {
        post({ type: 'failed', task: message.task, usage: usageSince() });
        return;
      }
      const service = new ExecutionService({ current: snapshot }, limits);
      let items: readonly unknown[];
      let outcomes: unknown[];
      try {
        items = sliceItems(message);
        outcomes = (service[message.method] as (items: readonly unknown[]) => unknown[])(items);
      } catch {
        post({ type: 'failed', task: message.task, usage: usageSince() });
        return;
      }
      if (message.json) {
        const json = jsonSlice(message.json, outcomes as ItemOutcome[], items);
        post({ type: 'done', task: message.task, json, usage: usageSince() }, [json.bytes.buffer as ArrayBuffer]);
        return;
      }
      if (message.frame) {
        const frame = frameSlice(message.frame, outcomes as ItemOutcome[], items);
        post({ type: 'done', task: message.task, frame, usage: usageSince() }, [frame.bytes.buffer as ArrayBuffer]);
      } else {
        const successes = packSuccesses(outcomes);
        post({ type: 'done', task: message.task, ...(successes ? { successes } : { outcomes: outcomes.map(toWire) }), usage: usageSince() });
      }
      // postMessage copied them: this thread's copies of decrypted bytes are wiped at once, and so are
      // the plaintexts of a packed encrypt slice.
      for (const outcome of outcomes) (outcome as { plaintext?: Buffer }).plaintext?.fill(0);
      if (message.packed && message.frame?.operation === 'encrypt') message.packed.bytes.fill(0);
    }
  }
}

port.on('message', receive);
