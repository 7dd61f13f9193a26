// The runtime cache: holds the current snapshot and swaps it atomically. Whoever feeds it (dev mode,
// a bootstrap file, the hub's syncs, the persisted store) goes through replace(); listeners hear of
// every swap (persistence subscribes here). A listener that keeps a copy elsewhere (the crypto workers)
// returns a promise; settled() waits for all of them, so a change answers only once every copy holds it.
import type { KeyRecord, PolicyRecord } from './records.js';
import { RuntimeSnapshot, type SnapshotContent } from './runtime-snapshot.js';
import { runInSlices } from './time-slices.js';
import { UsageCounters } from './usage-counters.js';

export type SnapshotListener = (snapshot: RuntimeSnapshot, previous: RuntimeSnapshot) => void | Promise<void>;

export class RuntimeCache {
  readonly counters = new UsageCounters();
  #current = RuntimeSnapshot.empty(this.counters);
  readonly #listeners = new Set<SnapshotListener>();
  #settling: Promise<unknown> = Promise.resolve();

  get current(): RuntimeSnapshot {
    return this.#current;
  }

  /** Builds a snapshot from content and makes it current; throws (changing nothing) if it is invalid. */
  replace(content: SnapshotContent): RuntimeSnapshot {
    return this.#install(RuntimeSnapshot.of(content, this.counters));
  }

  /**
   * replace() for a large content: the snapshot is built as sliced work while the current one keeps
   * serving every request, then made current in one step.
   */
  async replaceInSlices(content: SnapshotContent): Promise<RuntimeSnapshot> {
    return this.#install(await runInSlices(RuntimeSnapshot.build(content, this.counters)));
  }

  #install(next: RuntimeSnapshot): RuntimeSnapshot {
    const previous = this.#current;
    this.#current = next;
    const copies: Promise<void>[] = [];
    for (const listener of this.#listeners) {
      const copied = listener(next, previous);
      if (copied) copies.push(copied);
    }
    if (copies.length > 0) this.#settling = Promise.all([this.#settling, ...copies]);
    return next;
  }

  /** Upserts policies (by code) and keys (by alias and version) into a new snapshot. */
  upsert(change: {
    policies?: readonly PolicyRecord[];
    keys?: readonly KeyRecord[];
    runtimeVersion?: string;
  }): RuntimeSnapshot {
    const current = this.#current;
    const policies = new Map(current.policies.map((p) => [p.policyCode, p]));
    for (const p of change.policies ?? []) policies.set(p.policyCode, p);
    const keys = new Map(current.keys.map((k) => [`${k.alias}\u0000${k.version}`, k]));
    for (const k of change.keys ?? []) keys.set(`${k.alias}\u0000${k.version}`, k);
    return this.replace({
      policies: [...policies.values()],
      keys: [...keys.values()],
      runtimeVersion: change.runtimeVersion ?? current.runtimeVersion,
    });
  }

  /** Resolves once every listener's copy of the snapshots made current so far is in place. */
  settled(): Promise<void> {
    return this.#settling.then(() => undefined);
  }

  onChange(listener: SnapshotListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
