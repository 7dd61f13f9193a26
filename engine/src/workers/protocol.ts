// Messages between the engine's main thread and its crypto worker threads (worker-pool.ts,
// crypto-worker.ts). Everything here crosses a thread boundary by structured clone: plain data only
// (an EngineError travels as its catalogue code and message and is rebuilt on the other side).
import type { AuditFacts } from '../core/audit.js';
import type { ExecutionLimits } from '../core/execution-service.js';
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
    /** The slice's items, copied by structured clone; or instead, for a binary-frame batch, `packed`. */
    readonly items?: readonly unknown[];
    /**
     * A binary-frame batch's slice as the frame's own bytes of its items (one copy of one buffer, where
     * posting the items copies every object): the worker reads them with decodeFrameItems.
     */
    readonly packed?: PackedItems;
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
