// The crypto worker pool: SVC_WORKERS threads (docs/workers.md) that run slices of large batches
// through the core's ExecutionService while the main thread keeps HTTP, the operations API, the store,
// the audit trail and the usage counters. One snapshot for every worker:
// - each snapshot the runtime cache makes current gets a generation number and is posted to every
//   worker (a large one in parts, each copied in a slice of the event loop of its own);
//   RuntimeCache.settled() (awaited by CacheManager before a change answers) resolves once every live
//   worker acknowledged it, so a sync is visible to all workers before it answers;
// - a batch pins the generation current when it started, and all its slices, on whichever worker,
//   run under that generation (older generations are released once no batch uses them);
// - a worker that ends is replaced; the replacement receives every live generation before any slice.
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { EngineError, type ErrorCode, errors } from '../core/errors.js';
import type { ExecutionService } from '../core/execution-service.js';
import type { RuntimeCache } from '../core/runtime-cache.js';
import { recordParts, type RuntimeSnapshot, type SnapshotContent } from '../core/runtime-snapshot.js';
import { nextSlice, sliceDue } from '../core/time-slices.js';
import type { BatchOperation } from '../http/batch-results.js';
import type { RawBytesItem } from '../core/execution-service.js';
import {
  type BatchMethod,
  type FrameSlice,
  type FrameSource,
  type FromWorker,
  type JsonSlice,
  shareItems,
  type ToWorker,
  unpackSuccesses,
  type UsageDelta,
  type WireFailure,
  type WorkerInit,
} from './protocol.js';

type Done = Extract<FromWorker, { type: 'done' }>;
type Run = Extract<ToWorker, { type: 'run' }>;
/** How a slice's results come back: as outcomes (neither), JSON text or frame items. */
type Answer = Pick<Run, 'json' | 'frame'>;
/** A slice's items as they are posted: the items themselves, a binary frame's bytes of them, or columns. */
type SliceItems = Pick<Run, 'items' | 'packed' | 'shared'>;

/** Items per slice and plaintext bytes per slice: the same bounds the in-thread path uses. */
export const SLICE_ITEMS = 256;
export const SLICE_DATA_BYTES = 256 * 1024;
/** Batches smaller than this run on the main thread: a round trip to a worker costs more than they do. */
export const POOL_MIN_ITEMS = 64;
/** Records per snapshot message to a worker: a few milliseconds of copying. */
const SNAPSHOT_PART_RECORDS = 2000;

export function defaultWorkerCount(): number {
  return availableParallelism();
}

interface Generation {
  readonly number: number;
  readonly content: SnapshotContent;
  /** Batches in flight that pinned it. */
  users: number;
  /** Forgotten (neither current nor pinned): parts not yet sent are not sent. */
  released: boolean;
}

interface Task {
  readonly id: number;
  readonly generation: Generation;
  readonly method: BatchMethod;
  readonly items: SliceItems;
  readonly answer: Answer;
  attempts: number;
  resolve(done: Done): void;
  reject(error: Error): void;
}

interface Slot {
  readonly worker: Worker;
  /** Generations posted and not yet acknowledged, with who waits for them. */
  readonly acks: Map<number, () => void>;
  task: Task | undefined;
  online: boolean;
}

export type WorkerState = 'starting' | 'idle' | 'busy';

export class WorkerPool {
  readonly #slots = new Set<Slot>();
  readonly #queue: Task[] = [];
  readonly #generations = new Map<RuntimeSnapshot, Generation>();
  #nextGeneration = 1;
  #nextTask = 1;
  #closing = false;
  #replaced = 0;
  #slicesRun = 0;
  #crashes = 0;
  #stopListening: (() => void) | undefined;
  readonly #drained: (() => void)[] = [];

  constructor(
    readonly size: number,
    readonly execution: ExecutionService,
    readonly cache: RuntimeCache,
    readonly log: Logger,
    readonly workerUrl: URL = new URL('./crypto-worker.js', import.meta.url),
  ) {}

  /** Starts the workers with the current snapshot; later snapshots follow them through the cache. */
  start(): void {
    this.#track(this.cache.current);
    this.#stopListening = this.cache.onChange((next) => this.#publish(next));
    for (let i = 0; i < this.size; i++) this.#spawn();
  }

  /** Workers by state, for svc_workers{state}. */
  states(): Record<WorkerState, number> {
    const out: Record<WorkerState, number> = { starting: 0, idle: 0, busy: 0 };
    for (const slot of this.#slots) {
      out[!slot.online || slot.acks.size > 0 ? 'starting' : slot.task ? 'busy' : 'idle']++;
    }
    return out;
  }

  /** Batch slices the workers completed since start. */
  get slicesRun(): number {
    return this.#slicesRun;
  }

  /** Workers that ended unexpectedly and were replaced since start. */
  get replaced(): number {
    return this.#replaced;
  }

  /**
   * Runs a batch method over items: on the main thread when the batch is small, otherwise in slices on
   * the workers, all under the snapshot current now. Results keep the request order.
   */
  async run(method: BatchMethod, items: readonly unknown[], size: (item: unknown) => number): Promise<unknown[]> {
    const { execution } = this;
    execution.checkBatchSize(items.length);
    if (items.length < POOL_MIN_ITEMS || this.#closing) {
      execution.snapshot();
      return (execution[method] as (items: readonly unknown[]) => unknown[]).call(execution, items);
    }
    const out: unknown[] = [];
    for (const done of await this.#sliced(method, items, size, {})) {
      if (done.successes) for (const outcome of unpackSuccesses(done.successes)) out.push(outcome);
      for (const outcome of done.outcomes ?? []) out.push(fromWire(outcome));
    }
    return out;
  }

  /**
   * A JSON batch on the workers, each slice's results written as JSON text there (with the audit
   * facts when `audit`); undefined when the batch is small enough for the main thread (then run()).
   */
  async runJson(
    operation: BatchOperation,
    method: BatchMethod,
    items: readonly unknown[],
    size: (item: unknown) => number,
    audit: boolean,
  ): Promise<JsonSlice[] | undefined> {
    this.execution.checkBatchSize(items.length);
    if (items.length < POOL_MIN_ITEMS || this.#closing) return undefined;
    return (await this.#sliced(method, items, size, { json: { operation, audit } })).map((done) => done.json as JsonSlice);
  }

  /**
   * A binary-frame batch on the workers, each slice's result items encoded there (with the audit facts
   * when `audit`); undefined when the batch is small enough for the main thread (then run()).
   */
  async runFrame(
    operation: BatchOperation,
    method: BatchMethod,
    items: readonly unknown[],
    size: (item: unknown) => number,
    audit: boolean,
    source?: FrameSource,
  ): Promise<FrameSlice[] | undefined> {
    this.execution.checkBatchSize(items.length);
    if (items.length < POOL_MIN_ITEMS || this.#closing) return undefined;
    return (await this.#sliced(method, items, size, { frame: { operation, audit } }, source)).map((done) => done.frame as FrameSlice);
  }

  async #sliced(
    method: BatchMethod,
    items: readonly unknown[],
    size: (item: unknown) => number,
    answer: Answer,
    source?: FrameSource,
  ): Promise<Done[]> {
    const generation = this.#track(this.execution.snapshot());
    generation.users++;
    try {
      const slices: Promise<Done>[] = [];
      let start = 0;
      while (start < items.length) {
        let end = start;
        let bytes = 0;
        while (end < items.length && end - start < SLICE_ITEMS && bytes < SLICE_DATA_BYTES) {
          bytes += size(items[end]);
          end++;
        }
        slices.push(this.#submit(generation, method, sliceOf(items, start, end, method, source), answer));
        start = end;
      }
      return await Promise.all(slices);
    } finally {
      generation.users--;
      this.#releaseUnused();
    }
  }

  /** Ends the workers once the queue is empty (the listeners drained first, so nothing new arrives). */
  async close(): Promise<void> {
    this.#closing = true;
    this.#stopListening?.();
    if (this.#busy()) await new Promise<void>((resolve) => this.#drained.push(resolve));
    await Promise.all([...this.#slots].map((slot) => slot.worker.terminate()));
  }

  /** Ends one worker abruptly, as a crash would (test hook, docs/workers.md). */
  terminateOne(): void {
    const slot = [...this.#slots].find((s) => s.online);
    void slot?.worker.terminate();
  }

  #track(snapshot: RuntimeSnapshot): Generation {
    let generation = this.#generations.get(snapshot);
    if (!generation) {
      generation = { number: this.#nextGeneration++, content: contentOf(snapshot), users: 0, released: false };
      this.#generations.set(snapshot, generation);
    }
    return generation;
  }

  /** A new current snapshot: posted to every worker; resolves once every live worker installed it. */
  #publish(snapshot: RuntimeSnapshot): Promise<void> {
    const generation = this.#track(snapshot);
    this.#releaseUnused();
    return Promise.all([...this.#slots].map((slot) => this.#send(slot, generation))).then(() => undefined);
  }

  /**
   * Posts a generation to a worker; resolves once the worker installed it. A large one goes in parts, a
   * slice of the event loop each; the first message leaves before this returns, so a slice of a batch
   * under the generation (posted later) always finds it arriving, and the worker holds the slice until
   * the last part is in.
   */
  #send(slot: Slot, generation: Generation): Promise<void> {
    const installed = new Promise<void>((resolve) => slot.acks.set(generation.number, resolve));
    void this.#postParts(slot, generation);
    return installed;
  }

  async #postParts(slot: Slot, generation: Generation): Promise<void> {
    const { content, number } = generation;
    const { ahead, rest } = recordParts(content, SNAPSHOT_PART_RECORDS);
    for (const part of ahead) {
      this.#post(slot, { type: 'snapshot-part', generation: number, ...part });
      if (!sliceDue()) continue;
      await nextSlice();
      if (!this.#slots.has(slot)) return; // ended: its replacement gets every live generation
      if (generation.released) {
        // A newer snapshot was made current meanwhile: nobody needs this one (the worker dropped its parts).
        slot.acks.get(number)?.();
        slot.acks.delete(number);
        return;
      }
    }
    this.#post(slot, { type: 'snapshot', generation: number, content: { ...content, ...rest } });
  }

  /** Generations neither current nor pinned by a batch are forgotten, here and in every worker. */
  #releaseUnused(): void {
    const released: number[] = [];
    for (const [snapshot, generation] of this.#generations) {
      if (snapshot === this.cache.current || generation.users > 0) continue;
      this.#generations.delete(snapshot);
      generation.released = true;
      released.push(generation.number);
    }
    if (released.length === 0) return;
    for (const slot of this.#slots) this.#post(slot, { type: 'release', generations: released });
  }

  #submit(generation: Generation, method: BatchMethod, items: SliceItems, answer: Answer): Promise<Done> {
    return new Promise<Done>((resolve, reject) => {
      this.#queue.push({ id: this.#nextTask++, generation, method, items, answer, attempts: 0, resolve, reject });
      this.#dispatch();
    });
  }

  #busy(): boolean {
    return this.#queue.length > 0 || [...this.#slots].some((slot) => slot.task !== undefined);
  }

  #dispatch(): void {
    if (!this.#busy()) for (const resolve of this.#drained.splice(0)) resolve();
    for (const slot of this.#slots) {
      if (this.#queue.length === 0) return;
      if (slot.task || !slot.online) continue;
      const task = this.#queue.shift() as Task;
      slot.task = task;
      task.attempts++;
      this.#post(slot, {
        type: 'run',
        task: task.id,
        generation: task.generation.number,
        method: task.method,
        ...task.items,
        ...task.answer,
      });
    }
  }

  #post(slot: Slot, message: ToWorker): void {
    slot.worker.postMessage(message);
  }

  #spawn(): void {
    const init: WorkerInit = { limits: this.execution.limits };
    const worker = new Worker(this.workerUrl, { workerData: init });
    const slot: Slot = { worker, acks: new Map(), task: undefined, online: false };
    this.#slots.add(slot);
    // Every live generation first: messages arrive in order, so no slice can precede its snapshot.
    for (const generation of this.#generations.values()) void this.#send(slot, generation);
    worker.once('online', () => {
      slot.online = true;
      this.#crashes = 0;
      this.#dispatch();
    });
    worker.on('message', (message: FromWorker) => this.#receive(slot, message));
    worker.on('error', (error) => this.log.error({ err: error.message }, 'crypto worker failed'));
    worker.once('exit', (code) => this.#exited(slot, code));
  }

  #receive(slot: Slot, message: FromWorker): void {
    if (message.type === 'installed') {
      slot.acks.get(message.generation)?.();
      slot.acks.delete(message.generation);
      return;
    }
    this.#merge(message.usage);
    const task = slot.task;
    if (!task || task.id !== message.task) return;
    slot.task = undefined;
    this.#slicesRun++;
    if (message.type === 'done') task.resolve(message);
    else task.reject(errors.internal());
    this.#dispatch();
  }

  /** Worker counts land in the main thread's cells: their setters ask for reservations as before. */
  #merge(usage: readonly UsageDelta[]): void {
    for (const delta of usage) {
      const cell = this.cache.counters.cell(delta.alias, delta.version);
      if (delta.encryptions > 0) cell.encryptions += delta.encryptions;
      cell.decryptions += delta.decryptions;
    }
  }

  #exited(slot: Slot, code: number): void {
    this.#slots.delete(slot);
    // Whoever waited for this worker's acknowledgement need not wait: its replacement gets every snapshot.
    for (const resolve of slot.acks.values()) resolve();
    const task = slot.task;
    if (this.#closing) {
      task?.reject(errors.shuttingDown());
      if (this.#slots.size === 0) for (const queued of this.#queue.splice(0)) queued.reject(errors.shuttingDown());
      this.#dispatch();
      return;
    }
    this.#replaced++;
    this.#crashes++;
    this.log.error({ code, inFlight: task !== undefined }, 'crypto worker ended: replacing it');
    if (task) {
      // A slice is safe to run again (nothing of it left the engine); twice lost, the batch fails.
      if (task.attempts < 2) this.#queue.unshift(task);
      else task.reject(errors.internal());
    }
    // Back off when workers keep ending (at most 5 s), so a crash loop does not spin a core.
    const delay = Math.min(5_000, this.#crashes > 1 ? 100 * 2 ** (this.#crashes - 2) : 0);
    setTimeout(() => {
      if (!this.#closing) this.#spawn();
    }, delay).unref();
  }
}

/**
 * Items start to end-1 of a batch as a worker gets them. A binary frame's slice goes as the frame's own
 * bytes of those items, one buffer copied once (posting the decoded items copies every item object: a
 * third of the main thread's time under a frame load). Otherwise items that differ only in their data
 * go as columns (shareItems), encrypt items of bytes compacted, and any others as they are.
 */
function sliceOf(items: readonly unknown[], start: number, end: number, method: BatchMethod, source?: FrameSource): SliceItems {
  if (source) {
    const { body, offsets } = source;
    const from = offsets[start] as number;
    const to = offsets[end] as number;
    // Memory of its own: posting a view would copy all the memory under it.
    const bytes = Buffer.allocUnsafeSlow(to - from);
    body.copy(bytes, 0, from, to);
    return { packed: { bytes, count: end - start } };
  }
  const slice = items.slice(start, end);
  if (method === 'encryptBytesMany') return { items: compact(slice) };
  const shared = shareItems(slice);
  return shared ? { shared } : { items: slice };
}

/**
 * Encrypt items of bytes may be views into a larger buffer (a request body), and posting a view copies
 * the memory under it: each slice would carry all of it. One buffer of just the slice's bytes goes instead.
 */
function compact(items: unknown[]): unknown[] {
  const raw = items as RawBytesItem[];
  let size = 0;
  for (const item of raw) size += item.data.length;
  const bytes = Buffer.allocUnsafeSlow(size);
  let offset = 0;
  return raw.map((item) => {
    bytes.set(item.data, offset);
    const data = bytes.subarray(offset, (offset += item.data.length));
    return { ...item, data };
  });
}

function contentOf(snapshot: RuntimeSnapshot): SnapshotContent {
  return {
    policies: snapshot.policies,
    keys: snapshot.keys,
    runtimeVersion: snapshot.runtimeVersion,
    destroyed: snapshot.destroyed,
    minDecryptionVersions: snapshot.minDecryptionVersions,
  };
}

function fromWire(outcome: unknown): unknown {
  const item = outcome as Partial<WireFailure> & { plaintext?: Uint8Array };
  if (item.ok === false && item.code !== undefined) {
    return { ok: false, policyCode: item.policyCode, error: new EngineError(item.code as ErrorCode, item.message ?? '') };
  }
  if (item.plaintext instanceof Uint8Array && !Buffer.isBuffer(item.plaintext)) {
    const { buffer, byteOffset, byteLength } = item.plaintext;
    return { ...item, plaintext: Buffer.from(buffer, byteOffset, byteLength) };
  }
  return outcome;
}
