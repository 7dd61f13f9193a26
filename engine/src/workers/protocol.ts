// Messages between the engine's main thread and its crypto worker threads (worker-pool.ts,
// crypto-worker.ts). Everything here crosses a thread boundary by structured clone: plain data only
// (an EngineError travels as its catalogue code and message and is rebuilt on the other side).
import type { AuditFacts } from '../core/audit.js';
import type { ExecutionLimits, ItemSuccess } from '../core/execution-service.js';
import type { BatchOperation } from '../http/batch-results.js';
import type { RecordPart, SnapshotContent } from '../core/runtime-snapshot.js';

/** The ExecutionService batch methods a worker runs; each takes an array of items of its transport. */
export const BATCH_METHODS = [
  'encryptMany',
  'decryptMany',
  'rewrapMany',
  'encryptBytesMany',
  'decryptBytesMany',
  'rewrapCiphertexts',
] as const;
export type BatchMethod = (typeof BATCH_METHODS)[number];

/**
 * Runs a batch method over items, every item under one snapshot, results in request order: the worker
 * pool (small batches on the main thread, large ones in slices on the workers), or the main thread alone.
 * Every transport's batches go through one (HTTP batches, the wire endpoint's *_many commands).
 */
export interface ItemsRunner {
  run(method: BatchMethod, items: readonly unknown[], size: (item: unknown) => number): Promise<unknown[]>;
}

export interface WorkerInit {
  readonly limits: ExecutionLimits;
}

export type ToWorker =
  /**
   * Records of a large snapshot sent ahead of it in parts (one message of 140,000 policies took the
   * main thread 240 ms to copy); slices of batches under its generation wait for the rest.
   */
  | ({ readonly type: 'snapshot-part'; readonly generation: number } & RecordPart)
  /** Install a snapshot (its parts' records first) under its generation number; the worker answers `installed`. */
  | { readonly type: 'snapshot'; readonly generation: number; readonly content: SnapshotContent }
  /** Forget generations no batch uses any more. */
  | { readonly type: 'release'; readonly generations: readonly number[] }
  /** Run one slice of a batch under a generation the worker already holds (messages arrive in order). */
  | {
    readonly type: 'run';
    readonly task: number;
    readonly generation: number;
    readonly method: BatchMethod;
    /** The slice's items, copied by structured clone; or instead `packed` (a binary frame's) or `shared`. */
    readonly items?: readonly unknown[];
    /**
     * A binary-frame batch's slice as the frame's own bytes of its items (one copy of one buffer, where
     * posting the items copies every object): the worker reads them with decodeFrameItems.
     */
    readonly packed?: PackedItems;
    /** Or items that differ only in their data, as columns (shareItems; the worker rebuilds them). */
    readonly shared?: SharedItems;
    /** A JSON batch: answer with the slice's result objects as JSON text (and its audit facts when audited). */
    readonly json?: { readonly operation: BatchOperation; readonly audit: boolean };
    /** A binary-frame batch: answer with the slice's result items encoded (and its audit facts when audited). */
    readonly frame?: { readonly operation: BatchOperation; readonly audit: boolean };
  };

/** A run of a binary frame's items, as bytes (http/codecs/binary-frame.ts). */
export interface PackedItems {
  readonly bytes: Uint8Array;
  readonly count: number;
}

/**
 * Items that differ only in their data (the wire endpoint's *_many values, most JSON batches): their data
 * and the fields they share, in the items' own key order. Two arrays of strings cost a fraction of what
 * as many small objects cost to copy between threads (a 256-item slice: 7 against 28-43 µs to write,
 * 11 against 67-74 µs to read).
 */
export interface SharedItems {
  readonly data: readonly string[];
  readonly keys: readonly string[];
  readonly fields: Readonly<Record<string, string | number | boolean | null | undefined>>;
}

/** Successful outcomes with text data, as columns. */
export interface Successes {
  readonly policyCodes: readonly string[];
  readonly data: readonly string[];
}

type Field = SharedItems['fields'][string];
const isField = (value: unknown): value is Field => value === null || ['string', 'number', 'boolean', 'undefined'].includes(typeof value);

/**
 * The items as SharedItems when every one is a plain object with a string `data` and otherwise the same
 * keys, in the same order, holding the same primitive values; undefined otherwise (they go as they are).
 */
export function shareItems(items: readonly unknown[]): SharedItems | undefined {
  const first = items[0] as Record<string, unknown> | undefined;
  if (typeof first !== 'object' || first === null) return undefined;
  const keys = Object.keys(first);
  const fields: Record<string, Field> = {};
  for (const key of keys) {
    const value = first[key];
    if (key !== 'data' && !isField(value)) return undefined;
    if (key !== 'data') fields[key] = value as Field;
  }
  const data = new Array<string>(items.length);
  for (let i = 0; i < items.length; i++) {
    const item = items[i] as Record<string, unknown>;
    if (typeof item !== 'object' || item === null || Object.getPrototypeOf(item) !== Object.prototype) return undefined;
    if (typeof item.data !== 'string') return undefined;
    let n = 0;
    for (const key in item) {
      if (key !== keys[n++] || (key !== 'data' && item[key] !== fields[key])) return undefined;
    }
    if (n !== keys.length) return undefined;
    data[i] = item.data;
  }
  return { data, keys, fields };
}

/** The items SharedItems stands for, each a new object with the same keys in the same order. */
export function itemsOf(shared: SharedItems): Record<string, Field>[] {
  const { data, keys, fields } = shared;
  return data.map((value) => {
    const item: Record<string, Field> = {};
    for (const key of keys) item[key] = key === 'data' ? value : fields[key];
    return item;
  });
}

/** The outcomes as Successes when every one is an ItemSuccess (text data); undefined otherwise. */
export function packSuccesses(outcomes: readonly unknown[]): Successes | undefined {
  const policyCodes = new Array<string>(outcomes.length);
  const data = new Array<string>(outcomes.length);
  for (let i = 0; i < outcomes.length; i++) {
    const outcome = outcomes[i] as Partial<ItemSuccess>;
    if (outcome.ok !== true || typeof outcome.data !== 'string' || typeof outcome.policyCode !== 'string') return undefined;
    policyCodes[i] = outcome.policyCode;
    data[i] = outcome.data;
  }
  return { policyCodes, data };
}

export function unpackSuccesses(successes: Successes): ItemSuccess[] {
  return successes.data.map((data, i) => ({ ok: true, policyCode: successes.policyCodes[i] as string, data }));
}

/** Where a binary-frame batch's items came from: the request body and each item's offset in it. */
export interface FrameSource {
  readonly body: Buffer;
  readonly offsets: Uint32Array;
}

/** An item's failure, as data. */
export interface WireFailure {
  readonly ok: false;
  readonly policyCode?: string;
  readonly code: string;
  readonly message: string;
}

/** Encryptions and decryptions a worker made since its last report, per key version. */
export interface UsageDelta {
  readonly alias: string;
  readonly version: number;
  readonly encryptions: number;
  readonly decryptions: number;
}

export type FromWorker =
  | { readonly type: 'installed'; readonly generation: number }
  | {
    readonly type: 'done';
    readonly task: number;
    /** Successes as the service returned them (plaintext bytes arrive as Uint8Array), failures as WireFailure. */
    readonly outcomes?: readonly unknown[];
    /** Or, when every outcome succeeded with text, the outcomes as columns (packSuccesses). */
    readonly successes?: Successes;
    /** For a JSON batch instead: the results as comma-separated JSON objects (transferred). */
    readonly json?: JsonSlice;
    /** For a binary-frame batch instead: the result items, encoded. */
    readonly frame?: FrameSlice;
    readonly usage: readonly UsageDelta[];
  }
  /** The slice threw as a whole (the generation was missing, or a bug): the batch fails with INTERNAL. */
  | { readonly type: 'failed'; readonly task: number; readonly usage: readonly UsageDelta[] };

/**
 * A JSON batch slice's results, written by a worker: the result objects as comma-separated JSON, UTF-8
 * encoded there into memory of its own (transferred, not copied; the main thread joins bytes, and
 * neither encodes nor measures a long string).
 */
export interface JsonSlice {
  readonly bytes: Uint8Array;
  readonly succeeded: number;
  readonly audit?: AuditFacts;
}

/** A binary-frame batch slice's result items, encoded by a worker (transferred, not copied). */
export interface FrameSlice {
  readonly bytes: Uint8Array;
  readonly succeeded: number;
  readonly audit?: AuditFacts;
}
