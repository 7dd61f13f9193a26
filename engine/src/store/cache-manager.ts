// The one way the runtime cache changes once a store is attached: validate, persist in one
// transaction, then swap the in-memory snapshot. Changes are serialized, so two syncs never
// interleave their read-modify-write.
//
// Store outage rule: memory never gets ahead of the store. While the store cannot take a write,
// changes are refused (503, nothing changes) and execution keeps serving the current snapshot, so a
// crash during the outage can never lose a key that was already used to encrypt. What only lives in
// memory meanwhile (usage counters, heartbeat time) is written by the periodic state flush once the
// store answers again; hub snapshots are fetched again by the next heartbeat, since the engine keeps
// reporting the runtime version it has persisted.
import { EngineError, errors } from '../core/errors.js';
import type { KeyRecord, PolicyRecord } from '../core/records.js';
import type { RuntimeCache } from '../core/runtime-cache.js';
import { checkSnapshotContent, type RuntimeSnapshot, type SnapshotContent } from '../core/runtime-snapshot.js';
import type { UsageEntry } from '../core/usage-counters.js';
import type { Logger } from './logger.js';
import type { SnapshotStore } from './snapshot-store.js';
import { usageReport } from './usage-report.js';

export type ChangeMode = 'upsert' | 'replace';

export interface CacheChange {
  readonly policies?: { readonly mode: ChangeMode; readonly records: readonly PolicyRecord[] };
  readonly keys?: { readonly mode: ChangeMode; readonly records: readonly KeyRecord[] };
  /** The hub's name for the resulting runtime; unchanged when absent. */
  readonly runtimeVersion?: string;
}

export interface StoreHealth {
  readonly driver: string;
  readonly available: boolean;
  /** The last failure's message while unavailable (no secrets: driver messages only). */
  readonly lastError: string | null;
}

const keyId = (k: { alias: string; version: number }) => `${k.alias}\u0000${k.version}`;

function merge<T>(current: readonly T[], change: CacheChange['policies' | 'keys'], id: (item: T) => string): T[] {
  if (!change) return [...current];
  const base = change.mode === 'replace' ? new Map<string, T>() : new Map(current.map((item) => [id(item), item]));
  for (const record of change.records as readonly T[]) base.set(id(record), record);
  return [...base.values()];
}

export class CacheManager {
  #queue: Promise<unknown> = Promise.resolve();
  #available = true;
  #lastError: string | null = null;
  #lastSyncAt: Date | null = null;
  #lastHeartbeatAt: Date | null = null;
  #warned = new Set<string>();
  #flushTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly cache: RuntimeCache,
    readonly store: SnapshotStore,
    readonly log: Logger,
  ) {}

  /** Loads the persisted runtime into the cache; called once at start, before serving. */
  async restore(): Promise<Awaited<ReturnType<SnapshotStore['load']>>> {
    const stored = await this.store.load();
    for (const entry of stored.usage) {
      const cell = this.cache.counters.cell(entry.alias, entry.version);
      cell.encryptions = Math.max(cell.encryptions, entry.encryptions);
      cell.decryptions = Math.max(cell.decryptions, entry.decryptions);
    }
    this.cache.replace(stored.snapshot);
    this.#lastSyncAt = stored.lastSyncAt;
    this.#lastHeartbeatAt = stored.lastHeartbeatAt;
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

  /** Applies a change: persisted first, then made current. Throws STORE_UNAVAILABLE and changes nothing if the store fails. */
  apply(change: CacheChange): Promise<RuntimeSnapshot> {
    return this.#serial(async () => {
      const current = this.cache.current;
      const content: SnapshotContent = {
        policies: merge(current.policies, change.policies, (p: PolicyRecord) => p.policyCode),
        keys: merge(current.keys, change.keys, keyId),
        runtimeVersion: change.runtimeVersion ?? current.runtimeVersion,
      };
      checkSnapshotContent(content); // refused before anything is written
      const at = new Date();
      await this.persist('sync not applied', () => this.store.saveSnapshot(content, at));
      this.#lastSyncAt = at;
      return this.cache.replace(content);
    });
  }

  /** Empties the cache (and the stored snapshot); execution answers 503 until the next sync. */
  clear(): Promise<RuntimeSnapshot> {
    return this.apply({
      policies: { mode: 'replace', records: [] },
      keys: { mode: 'replace', records: [] },
      runtimeVersion: '',
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

  /** Writes usage counters and the heartbeat time; also how an unavailable store is noticed coming back. */
  flushState(): Promise<void> {
    return this.#serial(async () => {
      const usage: UsageEntry[] = this.cache.counters.entries();
      this.#warnNearLimit();
      await this.persist('state not flushed', () =>
        this.store.saveState({ lastHeartbeatAt: this.#lastHeartbeatAt, usage }),
      ).catch(() => undefined);
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
    await this.flushState();
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
