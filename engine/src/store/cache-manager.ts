// The one way the runtime cache changes once a store is attached: validate, persist in one
// transaction, then swap the in-memory snapshot. Changes are serialized, so two syncs never
// interleave their read-modify-write. The work over records (merge, checks, digest, the next
// snapshot) is sliced work (core/time-slices.ts): a change to a large runtime never holds the event
// loop for long, and requests keep seeing the current snapshot until the next one is swapped in.
//
// Store outage rule: memory never gets ahead of the store. While the store cannot take a write,
// changes are refused (503, nothing changes) and execution keeps serving the current snapshot, so a
// crash during the outage can never lose a key that was already used to encrypt. What only lives in
// memory meanwhile (usage counters, heartbeat time) is written by the periodic state flush once the
// store answers again; hub snapshots are fetched again by the next heartbeat, since the engine keeps
// reporting the runtime version it has persisted.
import { EngineError, errors } from '../core/errors.js';
import type { RuntimeCache } from '../core/runtime-cache.js';
import {
  type ChangeMode,
  destroyKey,
  holdBackReason,
  keyId,
  type MergeResult,
  mergeRuntime,
  type RuntimeChange,
  summarize,
} from '../core/runtime-merge.js';
import { checkSnapshotContent, importKeys, type RuntimeSnapshot } from '../core/runtime-snapshot.js';
import { runInSlices } from '../core/time-slices.js';
import type { UsageCell, UsageEntry } from '../core/usage-counters.js';
import type { Logger } from './logger.js';
import type { SnapshotStorePort } from './store-protocol.js';
import { usageReport } from './usage-report.js';

export type { ChangeMode };
export type CacheChange = RuntimeChange;

export interface StoreHealth {
  readonly driver: string;
  readonly available: boolean;
  /** The last failure's message while unavailable (no secrets: driver messages only). */
  readonly lastError: string | null;
}

/** A hub snapshot not applied because it would retire all or most of the runtime (runtime-merge.ts holdBackReason). */
export class HeldBackError extends Error {
  override readonly name = 'HeldBackError';
  constructor(
    readonly reason: string,
    readonly merged: MergeResult,
  ) {
    super(`snapshot held back: ${reason}`);
  }
}

/**
 * A heartbeat time alone is written at most this often: it only informs /runtime/info after a restart,
 * and each write wakes the embedded store's process (docs/operations.md, "Embedded store footprint").
 */
const HEARTBEAT_WRITE_INTERVAL_MS = 5 * 60_000;

export class CacheManager {
  #queue: Promise<unknown> = Promise.resolve();
  #available = true;
  #lastError: string | null = null;
  #lastSyncAt: Date | null = null;
  #lastHeartbeatAt: Date | null = null;
  #warned = new Set<string>();
  #flushTimer: NodeJS.Timeout | undefined;
  /** What the last state flush wrote (or restore read), so an unchanged state is not written again. */
  #flushed: { usage: string; heartbeatAt: number } | undefined;
  readonly #reserving = new Set<UsageCell>();
  #reservationScheduled = false;

  constructor(
    readonly cache: RuntimeCache,
    readonly store: SnapshotStorePort,
    readonly log: Logger,
  ) {}

  /** Loads the persisted runtime into the cache; called once at start, before serving. */
  async restore(): Promise<Awaited<ReturnType<SnapshotStorePort['load']>>> {
    const stored = await this.store.load();
    for (const entry of stored.usage) {
      const cell = this.cache.counters.cell(entry.alias, entry.version);
      // Start from the persisted reservation mark: a crash may have lost counts below it, never above.
      const mark = Math.max(cell.encryptions, entry.encryptions);
      cell.encryptions = mark;
      cell.reservedUpTo(mark);
      cell.decryptions = Math.max(cell.decryptions, entry.decryptions);
    }
    await this.cache.replaceInSlices(stored.snapshot);
    this.#lastSyncAt = stored.lastSyncAt;
    this.#lastHeartbeatAt = stored.lastHeartbeatAt;
    this.#flushed = { usage: JSON.stringify(stored.usage), heartbeatAt: stored.lastHeartbeatAt?.getTime() ?? 0 };
    this.cache.counters.onNearMark((cell) => this.#requestReservation(cell));
    return stored;
  }

  get health(): StoreHealth {
    return { driver: this.store.driver, available: this.#available, lastError: this.#lastError };
  }

  get lastSyncAt(): Date | null {
    return this.#lastSyncAt;
  }

  get lastHeartbeatAt(): Date | null {
    return this.#lastHeartbeatAt;
  }

  /**
   * Applies a change: persisted first (only the rows that changed), then made current. Throws
   * STORE_UNAVAILABLE and changes nothing if the store fails; with `guard`, throws HeldBackError and
   * changes nothing if the change would retire all or most of the runtime.
   */
  apply(change: CacheChange, options: { guard?: boolean } = {}): Promise<RuntimeSnapshot> {
    return this.#serial(async () => {
      const current = this.cache.current;
      const merged = await runInSlices(mergeRuntime(current, change, Date.now()));
      await runInSlices(checkSnapshotContent(merged.content)); // refused before anything is written
      if (options.guard) {
        const reason = await runInSlices(holdBackReason(current, merged));
        if (reason) throw new HeldBackError(reason, merged);
      }
      if (merged.skippedDestroyed.length > 0) {
        this.log.warn({ keys: merged.skippedDestroyed }, 'change lists destroyed key versions: they stay destroyed');
      }
      if (merged.retiredKeys + merged.retiredPolicies > 0) {
        this.log.warn(
          { retiredKeys: merged.retiredKeys, retiredPolicies: merged.retiredPolicies },
          'records no longer listed are RETIRED: decrypt only, kept in the store, restored when listed again',
        );
      }
      await runInSlices(importKeys(merged.content));
      const summary = await runInSlices(summarize(merged.content));
      const at = new Date();
      await this.persist('sync not applied', () =>
        this.store.saveChanges(
          {
            policies: merged.changedPolicies,
            keys: merged.changedKeys,
            destroyed: [],
            minimums: merged.changedMinimums,
            runtimeVersion: merged.content.runtimeVersion,
            summary,
          },
          at,
        ),
      );
      this.#lastSyncAt = at;
      const next = await this.cache.replaceInSlices(merged.content);
      // Every crypto worker holds the new snapshot before the change answers (docs/workers.md).
      await this.cache.settled();
      return next;
    });
  }

  /** Retires every record (decrypt only, nothing erased) and forgets the runtime version; encryption stops until the next sync. */
  clear(): Promise<RuntimeSnapshot> {
    return this.apply({
      policies: { mode: 'replace', records: [] },
      keys: { mode: 'replace', records: [] },
      runtimeVersion: '',
    });
  }

  /** Erases one RETIRED or DISABLED key version's material after the grace period (an operator's explicit act). */
  destroyKey(alias: string, version: number, graceMs: number): Promise<RuntimeSnapshot> {
    return this.#serial(async () => {
      const current = this.cache.current;
      const { content, destroyed } = destroyKey(current, alias, version, Date.now(), graceMs);
      const summary = await runInSlices(summarize(content));
      await this.persist('key not destroyed', () =>
        this.store.saveChanges(
          {
            policies: [],
            keys: [],
            destroyed: [destroyed],
            minimums: [],
            runtimeVersion: content.runtimeVersion,
            summary,
          },
          null,
        ),
      );
      this.log.warn({ alias, version }, 'key version DESTROYED: its material is erased; ciphertexts under it can no longer be decrypted');
      const next = await this.cache.replaceInSlices(content);
      await this.cache.settled();
      return next;
    });
  }

  noteHeartbeat(at: Date): void {
    this.#lastHeartbeatAt = at;
  }

  /**
   * Runs a store write, tracking the store's health; failures become STORE_UNAVAILABLE naming what
   * did not happen. Exposed for the other persisted facts (runtime identity).
   */
  async persist<T>(consequence: string, write: () => Promise<T>): Promise<T> {
    try {
      const result = await write();
      this.#markAvailable();
      return result;
    } catch (error) {
      if (error instanceof EngineError) throw error;
      const detail = (error as Error).message || String(error);
      this.#markUnavailable(detail);
      throw errors.storeUnavailable(`${consequence} (${detail})`);
    }
  }

  #requestReservation(cell: UsageCell): void {
    this.#reserving.add(cell);
    if (this.#reservationScheduled) return;
    this.#reservationScheduled = true;
    setImmediate(() => void this.#reserve());
  }

  /** Persists a reservation a block ahead for every cell near its mark (one write for all of them). */
  async #reserve(): Promise<void> {
    this.#reservationScheduled = false;
    const cells = [...this.#reserving];
    this.#reserving.clear();
    const block = this.cache.counters.block;
    const marks = cells.map((cell) => Math.max(cell.reserved, cell.encryptions) + block);
    try {
      await this.store.saveUsage(
        cells.map((cell, i) => ({
          alias: cell.alias,
          version: cell.version,
          encryptions: cell.encryptions,
          decryptions: cell.decryptions,
          reserved: marks[i] as number,
        })),
      );
      cells.forEach((cell, i) => cell.reservedUpTo(marks[i] as number));
    } catch (error) {
      this.log.error(
        { err: (error as Error).message, keys: cells.length },
        'usage reservation not persisted: a crash now could under-count encryptions',
      );
      for (const cell of cells) cell.rearm();
    }
  }

  /** Writes usage counters and the heartbeat time; also how an unavailable store is noticed coming back. */
  /**
   * Writes usage counters and the heartbeat time when they changed (the heartbeat time alone only
   * every HEARTBEAT_WRITE_INTERVAL_MS); `force` writes them whatever changed (at shutdown).
   */
  flushState(force = false): Promise<void> {
    return this.#serial(async () => {
      const usage: UsageEntry[] = this.cache.counters.entries();
      this.#warnNearLimit();
      const state = { usage: JSON.stringify(usage), heartbeatAt: this.#lastHeartbeatAt?.getTime() ?? 0 };
      const last = this.#flushed;
      const unchanged = last !== undefined && last.usage === state.usage &&
        state.heartbeatAt - last.heartbeatAt < HEARTBEAT_WRITE_INTERVAL_MS;
      // While the store is down the flush also probes it (that is how its return is noticed).
      if (unchanged && !force && this.#available) return;
      await this.persist('state not flushed', async () => {
        await this.store.saveState({ lastHeartbeatAt: this.#lastHeartbeatAt, usage });
        this.#flushed = state;
      }).catch(() => undefined);
    });
  }

  startStateFlush(intervalMs: number): void {
    this.stopStateFlush();
    this.#flushTimer = setInterval(() => void this.flushState(), intervalMs);
    this.#flushTimer.unref();
  }

  stopStateFlush(): void {
    if (this.#flushTimer) clearInterval(this.#flushTimer);
    this.#flushTimer = undefined;
  }

  /** Stops the flush timer, writes the state one last time and closes the store. */
  async close(): Promise<void> {
    this.stopStateFlush();
    await this.flushState(true);
    await this.#queue.catch(() => undefined);
    await this.store.close();
  }

  #warnNearLimit(): void {
    for (const usage of usageReport(this.cache)) {
      const id = keyId(usage);
      if (usage.nearLimit && !this.#warned.has(id)) {
        this.#warned.add(id);
        this.log.warn(
          { alias: usage.alias, version: usage.version, encryptions: usage.encryptions },
          'key version is near the AES-GCM random-nonce limit of 2^32 encryptions: rotate it',
        );
      }
    }
  }

  #markAvailable(): void {
    if (!this.#available) this.log.info({ driver: this.store.driver }, 'snapshot store is available again');
    this.#available = true;
    this.#lastError = null;
  }

  #markUnavailable(detail: string): void {
    if (this.#available) {
      this.log.error(
        { driver: this.store.driver, err: detail },
        'snapshot store unavailable: serving from memory, refusing changes',
      );
    }
    this.#available = false;
    this.#lastError = detail;
  }

  #serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task, task);
    this.#queue = run.catch(() => undefined);
    return run;
  }
}
