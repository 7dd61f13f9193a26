// The state rules of a runtime change: how a sync, a hub snapshot or a cache clear turns the current
// records into the next ones, and which records changed (what the store must write). Nothing here
// ever drops key material: a record its source stops listing becomes RETIRED (decrypt only), a
// DISABLED one stays DISABLED, and both come back when a later change lists them again. Only an
// explicit destroy (destroyKey) erases material, and only after a grace period.
import { hash } from 'node:crypto';
import { errors } from './errors.js';
import type { DestroyedKey, KeyRecord, PolicyRecord } from './records.js';
import type { SnapshotContent } from './runtime-snapshot.js';
import type { Sliced } from './time-slices.js';

export type ChangeMode = 'upsert' | 'replace';

export interface RuntimeChange {
  readonly policies?: { readonly mode: ChangeMode; readonly records: readonly PolicyRecord[] };
  readonly keys?: { readonly mode: ChangeMode; readonly records: readonly KeyRecord[] };
  /** The hub's name for the resulting runtime; unchanged when absent. */
  readonly runtimeVersion?: string;
  /** Minimum decryption versions set explicitly (operator endpoint), by alias. */
  readonly minDecryptionVersions?: ReadonlyMap<string, number>;
}

export interface MergeResult {
  readonly content: SnapshotContent;
  /** Records that are new or differ from the current ones: what the store writes. */
  readonly changedPolicies: PolicyRecord[];
  readonly changedKeys: KeyRecord[];
  readonly changedMinimums: [alias: string, min: number][];
  /** How many live (not RETIRED, not DISABLED) records this change retires. */
  readonly retiredPolicies: number;
  readonly retiredKeys: number;
  /** Listed versions that stay destroyed (their material is gone). */
  readonly skippedDestroyed: string[];
}

export const keyId = (k: { alias: string; version: number }): string => `${k.alias}\u0000${k.version}`;
const isLive = (status: string) => status === 'ACTIVE' || status === 'DECRYPT_ONLY';

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

function samePolicy(a: PolicyRecord, b: PolicyRecord): boolean {
  return (
    a.policyName === b.policyName &&
    a.policyVersion === b.policyVersion &&
    a.algorithm === b.algorithm &&
    a.keyAlias === b.keyAlias &&
    a.status === b.status
  );
}

function* mergePolicies(current: readonly PolicyRecord[], change: RuntimeChange['policies']) {
  const changed: PolicyRecord[] = [];
  if (!change) return { records: [...current], changed, retired: 0 };
  const next = new Map<string, PolicyRecord>();
  for (const p of current) {
    next.set(p.policyCode, p);
    yield;
  }
  const listed = new Set<string>();
  for (const record of change.records) {
    yield;
    listed.add(record.policyCode);
    const existing = next.get(record.policyCode);
    if (existing && samePolicy(existing, record)) continue;
    next.set(record.policyCode, record);
    changed.push(record);
  }
  let retired = 0;
  if (change.mode === 'replace') {
    for (const [code, existing] of next) {
      yield;
      if (listed.has(code) || !isLive(existing.status)) continue;
      const record: PolicyRecord = { ...existing, status: 'RETIRED' };
      next.set(code, record);
      changed.push(record);
      retired++;
    }
  }
  return { records: [...next.values()], changed, retired };
}

function* mergeKeys(current: SnapshotContent, change: RuntimeChange['keys'], now: number) {
  const changed: KeyRecord[] = [];
  const skippedDestroyed: string[] = [];
  const minimums = new Map<string, number>();
  if (!change) return { records: [...current.keys], changed, retired: 0, skippedDestroyed, minimums };
  const destroyed = new Set((current.destroyed ?? []).map(keyId));
  const next = new Map<string, KeyRecord>();
  for (const k of current.keys) {
    next.set(keyId(k), k);
    yield;
  }
  const listed = new Set<string>();
  for (const incoming of change.records) {
    yield;
    const id = keyId(incoming);
    listed.add(id);
    if (incoming.minDecryptionVersion !== undefined) {
      minimums.set(incoming.alias, Math.max(minimums.get(incoming.alias) ?? 0, incoming.minDecryptionVersion));
    }
    if (destroyed.has(id)) {
      skippedDestroyed.push(`${incoming.alias} version ${incoming.version}`);
      continue;
    }
    const existing = next.get(id);
    // A version's material never changes: otherwise old ciphertexts would meet another key under the
    // same version (and a stranger could swap keys under names the applications already use).
    if (existing && (existing.algorithm !== incoming.algorithm || !sameBytes(existing.material, incoming.material))) {
      throw errors.keyStateConflict(
        `key ${incoming.alias} version ${incoming.version} already holds other material; a key version's material never changes (send a new version)`,
      );
    }
    if (existing && existing.status === incoming.status) continue;
    const { minDecryptionVersion: _min, ...plain } = incoming;
    const record: KeyRecord = { ...plain, statusSince: now };
    next.set(id, record);
    changed.push(record);
  }
  let retired = 0;
  if (change.mode === 'replace') {
    for (const [id, existing] of next) {
      yield;
      if (listed.has(id) || !isLive(existing.status)) continue;
      const record: KeyRecord = { ...existing, status: 'RETIRED', statusSince: now };
      next.set(id, record);
      changed.push(record);
      retired++;
    }
  }
  return { records: [...next.values()], changed, retired, skippedDestroyed, minimums };
}

/**
 * The next content of a change and what differs from the current one, as sliced work (time-slices.ts);
 * throws (changing nothing) on a conflict.
 */
export function* mergeRuntime(current: SnapshotContent, change: RuntimeChange, now: number): Sliced<MergeResult> {
  const policies = yield* mergePolicies(current.policies, change.policies);
  const keys = yield* mergeKeys(current, change.keys, now);
  const minimums = new Map(current.minDecryptionVersions ?? []);
  const changedMinimums: [string, number][] = [];
  for (const source of [keys.minimums, change.minDecryptionVersions ?? new Map<string, number>()]) {
    for (const [alias, min] of source) {
      if (minimums.get(alias) === min) continue;
      minimums.set(alias, min);
      changedMinimums.push([alias, min]);
    }
  }
  return {
    content: {
      policies: policies.records,
      keys: keys.records,
      runtimeVersion: change.runtimeVersion ?? current.runtimeVersion,
      destroyed: current.destroyed ?? [],
      minDecryptionVersions: minimums,
    },
    changedPolicies: policies.changed,
    changedKeys: keys.changed,
    changedMinimums,
    retiredPolicies: policies.retired,
    retiredKeys: keys.retired,
    skippedDestroyed: keys.skippedDestroyed,
  };
}

/**
 * Checks that a key version may be destroyed now: it exists, it is RETIRED or DISABLED, and it has
 * been so for at least the grace period. Returns the content without it and its tombstone.
 */
export function destroyKey(
  current: SnapshotContent,
  alias: string,
  version: number,
  now: number,
  graceMs: number,
): { content: SnapshotContent; destroyed: DestroyedKey } {
  const key = current.keys.find((k) => k.alias === alias && k.version === version);
  if (!key) {
    if ((current.destroyed ?? []).some((d) => d.alias === alias && d.version === version)) {
      throw errors.keyStateConflict(`key ${alias} version ${version} is already destroyed`);
    }
    throw errors.operationNotFound(`key ${alias} version ${version} is not in the runtime cache`);
  }
  if (key.status !== 'RETIRED' && key.status !== 'DISABLED') {
    throw errors.keyStateConflict(
      `key ${alias} version ${version} is ${key.status}: only a RETIRED or DISABLED version may be destroyed`,
    );
  }
  const since = key.statusSince ?? now;
  if (now - since < graceMs) {
    const until = new Date(since + graceMs).toISOString();
    throw errors.keyStateConflict(
      `key ${alias} version ${version} has been ${key.status} since ${new Date(since).toISOString()}; it may be destroyed after the grace period, from ${until}`,
    );
  }
  const destroyed: DestroyedKey = { alias, version, algorithm: key.algorithm, destroyedAt: now };
  return {
    content: {
      ...current,
      keys: current.keys.filter((k) => k !== key),
      destroyed: [...(current.destroyed ?? []), destroyed],
    },
    destroyed,
  };
}

export interface ContentSummary {
  readonly digest: string;
  /** Stored rows: policies (every status), keys (every status, destroyed included), minimums. */
  readonly policyCount: number;
  readonly keyCount: number;
}

/**
 * SHA-256 of a line, as a string of 32 characters of one byte each ('binary': latin1): a record's hash is kept as long
 * as the record, and 140,000 strings cost the garbage collector far less than as many Buffers.
 */
const sha256 = (line: string): string => hash('sha256', line, 'binary');

const lineHashes = new WeakMap<object, string>();

/** A record's line hash, computed once per record object (records are immutable). */
function lineHash<T extends object>(record: T, line: (record: T) => string): string {
  let hashed = lineHashes.get(record);
  if (hashed === undefined) {
    hashed = sha256(line(record));
    lineHashes.set(record, hashed);
  }
  return hashed;
}

const policyLine = (p: PolicyRecord) => `p|${p.policyCode}|${p.policyName}|${p.policyVersion}|${p.algorithm}|${p.keyAlias}|${p.status}`;
const keyLine = (k: KeyRecord) => `k|${k.alias}|${k.version}|${k.algorithm}|${k.status}`;
const destroyedLine = (d: DestroyedKey) => `k|${d.alias}|${d.version}|${d.algorithm}|DESTROYED`;

/**
 * An order-independent digest of what the store must hold (record names, statuses, minimums; no
 * material): XOR of per-row hashes, each cached per record object, so an incremental sync over a
 * large runtime does not hash every record again; as sliced work, so a sync that brings many new
 * records (a first sync of a large runtime) does not hold other requests while it hashes them.
 * Checked at load to catch a damaged store.
 */
export function* summarize(content: SnapshotContent): Sliced<ContentSummary> {
  const acc = Buffer.alloc(32);
  const add = (hashed: string) => {
    for (let i = 0; i < 32; i++) acc[i] = (acc[i] as number) ^ hashed.charCodeAt(i);
  };
  for (const p of content.policies) {
    add(lineHash(p, policyLine));
    yield;
  }
  for (const k of content.keys) {
    add(lineHash(k, keyLine));
    yield;
  }
  for (const d of content.destroyed ?? []) add(lineHash(d, destroyedLine));
  for (const [alias, min] of content.minDecryptionVersions ?? []) {
    add(sha256(`m|${alias}|${min}`));
  }
  return {
    digest: acc.toString('hex'),
    policyCount: content.policies.length,
    keyCount: content.keys.length + (content.destroyed ?? []).length,
  };
}

function* countLive(records: readonly { readonly status: string }[]): Sliced<number> {
  let live = 0;
  for (const record of records) {
    if (isLive(record.status)) live++;
    yield;
  }
  return live;
}

/**
 * Why a hub snapshot looks like a takeover or an accident rather than a change, if it does: it would
 * leave no live key versions (a stranger's hub cannot send any: keys must unwrap under this engine's
 * master key), fewer than half of them (from 4 live versions up), or no live policies. Such a snapshot
 * is held back until an operator applies it (docs/operations.md#held-back-snapshots).
 */
export function* holdBackReason(current: SnapshotContent, merged: MergeResult): Sliced<string | undefined> {
  const liveKeys = yield* countLive(current.keys);
  const livePolicies = yield* countLive(current.policies);
  const keysAfter = yield* countLive(merged.content.keys);
  const policiesAfter = yield* countLive(merged.content.policies);
  if (merged.retiredKeys > 0 && keysAfter === 0) return `it would retire all ${liveKeys} live key versions`;
  if (liveKeys >= 4 && merged.retiredKeys > 0 && keysAfter * 2 < liveKeys) {
    return `it would retire ${merged.retiredKeys} of ${liveKeys} live key versions, leaving ${keysAfter}`;
  }
  if (merged.retiredPolicies > 0 && policiesAfter === 0) return `it would retire all ${livePolicies} live policies`;
  return undefined;
}
