// An immutable view of the runtime cache: policies by code and by name/version, keys by alias and
// version, and what encryption under each policy needs, prepared once per snapshot (on first use) so the hot path
// is a map lookup. A batch takes one snapshot and sees one consistent view even if a sync lands. A snapshot
// is built as sliced work (time-slices.ts): a sync of a large runtime builds the next one while the current
// one keeps serving, without holding the event loop.
import { type AeadKey, ALGORITHM_IDS, importKey } from './aead.js';
import { associatedData, encodeHeader } from './ciphertext-envelope.js';
import { EngineError, errors } from './errors.js';
import type { DestroyedKey, KeyRecord, PolicyRecord } from './records.js';
import { runNow, type Sliced } from './time-slices.js';
import type { UsageCell, UsageCounters } from './usage-counters.js';

export interface PreparedKey {
  readonly alias: string;
  readonly version: number;
  readonly status: KeyRecord['status'];
  readonly aead: AeadKey;
  readonly usage: UsageCell;
}

/** Everything an encryption under one policy needs, computed once per snapshot. */
export interface EncryptContext {
  readonly policy: PolicyRecord;
  readonly key: PreparedKey;
  readonly header: Buffer;
  readonly aad: Buffer;
}

export interface SnapshotContent {
  readonly policies: readonly PolicyRecord[];
  readonly keys: readonly KeyRecord[];
  /** Opaque version of the runtime as the hub (or the bootstrap source) names it. */
  readonly runtimeVersion: string;
  /** Key versions whose material was destroyed: their names stay so they are never reused. */
  readonly destroyed?: readonly DestroyedKey[];
  /** Per alias: versions below this refuse to decrypt (and are never chosen to encrypt). */
  readonly minDecryptionVersions?: ReadonlyMap<string, number>;
}

// Imported keys per record object: a snapshot built after an incremental sync reuses the previous
// one's imports instead of importing every key again.
const imported = new WeakMap<KeyRecord, AeadKey>();

function importOnce(key: KeyRecord): AeadKey {
  let aead = imported.get(key);
  if (!aead) {
    aead = importKey(key.algorithm, key.material);
    imported.set(key, aead);
  }
  return aead;
}

/** Imports a content's keys (each once per record object), as sliced work. */
export function* importKeys(content: SnapshotContent): Sliced<void> {
  for (const key of content.keys) {
    importOnce(key);
    yield;
  }
}

/**
 * Consistency rules across records, checked before any snapshot is persisted or served: a policy name
 * and version names one policy, and every key under a policy's alias has the policy's algorithm.
 */
export function* checkSnapshotContent(content: SnapshotContent): Sliced<void> {
  const named = new Map<string, string>();
  for (const p of content.policies) {
    yield;
    if (p.status === 'RETIRED') continue; // kept for decryption only; never resolved by name
    const id = `${p.policyName}\u0000${p.policyVersion}`;
    const other = named.get(id);
    if (other !== undefined && other !== p.policyCode) {
      throw errors.operationInvalid(`policies ${other} and ${p.policyCode} are both ${p.policyName} version ${p.policyVersion}`);
    }
    named.set(id, p.policyCode);
  }
  // One key per (alias, algorithm) is enough to find a mismatch: linear, not policies x keys.
  const byAlias = new Map<string, Map<string, KeyRecord>>();
  for (const k of content.keys) {
    const algorithms = byAlias.get(k.alias) ?? new Map<string, KeyRecord>();
    byAlias.set(k.alias, algorithms);
    if (!algorithms.has(k.algorithm)) algorithms.set(k.algorithm, k);
    yield;
  }
  for (const p of content.policies) {
    for (const k of byAlias.get(p.keyAlias)?.values() ?? []) {
      if (k.algorithm === p.algorithm) continue;
      throw errors.operationInvalid(
        `key ${k.alias} version ${k.version} is ${k.algorithm} but policy ${p.policyCode} using it is ${p.algorithm}`,
      );
    }
    yield;
  }
}

/** Policies and keys of a content or of a change. */
export interface RecordPart {
  readonly policies: readonly PolicyRecord[];
  readonly keys: readonly KeyRecord[];
}

/**
 * Records to send to another thread or process, in parts of `size` (policies first): the parts to send
 * ahead and the rest (at most `size`, possibly none) to send with the message that completes them.
 * Copying a message is one step on the sending thread; parts keep each step short.
 */
export function recordParts(records: RecordPart, size: number): { ahead: RecordPart[]; rest: RecordPart } {
  const { policies, keys } = records;
  const ahead: RecordPart[] = [];
  let p = 0;
  let k = 0;
  while (policies.length - p + keys.length - k > size) {
    const part = { policies: policies.slice(p, p + size), keys: keys.slice(k, k + size - Math.min(size, policies.length - p)) };
    p += part.policies.length;
    k += part.keys.length;
    ahead.push(part);
  }
  return { ahead, rest: { policies: policies.slice(p), keys: keys.slice(k) } };
}

/** A snapshot's lookup tables and counts. */
interface Indexes {
  readonly byCode: Map<string, PolicyRecord>;
  readonly byName: Map<string, PolicyRecord[]>;
  readonly keys: Map<string, Map<number, PreparedKey>>;
  readonly policyCount: number;
  readonly keyCount: number;
}

export class RuntimeSnapshot implements SnapshotContent {
  readonly policies: readonly PolicyRecord[];
  readonly keys: readonly KeyRecord[];
  readonly runtimeVersion: string;
  readonly destroyed: readonly DestroyedKey[];
  readonly minDecryptionVersions: ReadonlyMap<string, number>;
  /** Policies the source lists (RETIRED ones are kept for decryption but not counted). */
  readonly policyCount: number;
  /** Key versions the source lists (RETIRED ones are kept for decryption but not counted). */
  readonly keyCount: number;
  readonly #byCode: Map<string, PolicyRecord>;
  readonly #byName: Map<string, PolicyRecord[]>;
  readonly #keys: Map<string, Map<number, PreparedKey>>;
  readonly #encrypt = new Map<string, EncryptContext | EngineError>();

  private constructor(content: SnapshotContent, indexes: Indexes) {
    this.policies = Object.freeze([...content.policies]);
    this.keys = Object.freeze([...content.keys]);
    this.runtimeVersion = content.runtimeVersion;
    this.destroyed = Object.freeze([...(content.destroyed ?? [])]);
    this.minDecryptionVersions = new Map(content.minDecryptionVersions ?? []);
    this.#byCode = indexes.byCode;
    this.#byName = indexes.byName;
    this.#keys = indexes.keys;
    this.policyCount = indexes.policyCount;
    this.keyCount = indexes.keyCount;
  }

  /** Builds a snapshot as sliced work: content checked (throws, building nothing, if invalid), keys imported, indexes built. */
  static *build(content: SnapshotContent, counters: UsageCounters): Sliced<RuntimeSnapshot> {
    yield* checkSnapshotContent(content);
    const keys = new Map<string, Map<number, PreparedKey>>();
    let keyCount = 0;
    for (const key of content.keys) {
      if (key.status !== 'RETIRED') keyCount++;
      const versions = keys.get(key.alias) ?? new Map<number, PreparedKey>();
      keys.set(key.alias, versions);
      versions.set(key.version, {
        alias: key.alias,
        version: key.version,
        status: key.status,
        aead: importOnce(key),
        usage: counters.cell(key.alias, key.version),
      });
      yield;
    }
    const byCode = new Map<string, PolicyRecord>();
    const byName = new Map<string, PolicyRecord[]>();
    let policyCount = 0;
    for (const policy of content.policies) {
      yield;
      byCode.set(policy.policyCode, policy);
      if (policy.status === 'RETIRED') continue;
      policyCount++;
      const named = byName.get(policy.policyName) ?? [];
      named.push(policy);
      byName.set(policy.policyName, named);
    }
    for (const named of byName.values()) {
      named.sort((a, b) => a.policyVersion - b.policyVersion);
      yield;
    }
    return new RuntimeSnapshot(content, { byCode, byName, keys, policyCount, keyCount });
  }

  /** Builds a snapshot at once (small contents, worker threads, tests); throws if the content is invalid. */
  static of(content: SnapshotContent, counters: UsageCounters): RuntimeSnapshot {
    return runNow(RuntimeSnapshot.build(content, counters));
  }

  static empty(counters: UsageCounters): RuntimeSnapshot {
    return RuntimeSnapshot.of({ policies: [], keys: [], runtimeVersion: '' }, counters);
  }

  get retiredPolicyCount(): number {
    return this.policies.length - this.policyCount;
  }

  get retiredKeyCount(): number {
    return this.keys.length - this.keyCount;
  }

  /**
   * The key a ciphertext names, if it may decrypt: ACTIVE, DECRYPT_ONLY and RETIRED versions may;
   * DISABLED and destroyed ones are not found; versions below the alias's minimum are refused.
   */
  decryptKey(alias: string, version: number): PreparedKey | EngineError {
    const key = this.#keys.get(alias)?.get(version);
    if (!key || key.status === 'DISABLED') return errors.keyNotFound(alias, version);
    const min = this.minDecryptionVersions.get(alias);
    if (min !== undefined && version < min) return errors.keyBelowMinVersion(alias, version, min);
    return key;
  }

  /** Execution needs at least one policy and one key; otherwise the engine answers 503. */
  get configured(): boolean {
    return this.policies.length > 0 && this.keys.length > 0;
  }

  policyByCode(code: string): PolicyRecord | undefined {
    return this.#byCode.get(code);
  }

  /** The given version of a named policy, or its latest version when none is given. */
  policyByName(name: string, version?: number): PolicyRecord | undefined {
    const named = this.#byName.get(name);
    if (!named) return undefined;
    return version === undefined ? named[named.length - 1] : named.find((p) => p.policyVersion === version);
  }

  key(alias: string, version: number): PreparedKey | undefined {
    return this.#keys.get(alias)?.get(version);
  }

  /**
   * The prepared encryption context of a policy, or the error explaining why it cannot encrypt. Prepared
   * on first use and kept for the snapshot's life (it is immutable): building a snapshot stays linear in
   * cheap map inserts, so a sync of many policies does not hold the event loop preparing contexts that
   * may never be used.
   */
  encryptContext(policy: PolicyRecord): EncryptContext | EngineError {
    let context = this.#encrypt.get(policy.policyCode);
    if (context === undefined) {
      const own = this.#byCode.get(policy.policyCode);
      if (!own) return errors.policyNotFound(policy.policyCode);
      context = this.#prepareEncrypt(own);
      this.#encrypt.set(policy.policyCode, context);
    }
    return context;
  }

  #prepareEncrypt(policy: PolicyRecord): EncryptContext | EngineError {
    if (policy.status !== 'ACTIVE') {
      const reason = {
        DISABLED: 'is disabled',
        DECRYPT_ONLY: 'is decrypt-only',
        RETIRED: 'is retired (no longer listed by its source; decrypt only)',
      }[policy.status];
      return errors.policyNotUsable(policy.policyCode, reason);
    }
    // Never encrypt under a version the alias's minimum would refuse to decrypt.
    const min = this.minDecryptionVersions.get(policy.keyAlias) ?? 0;
    let newest: PreparedKey | undefined;
    for (const key of this.#keys.get(policy.keyAlias)?.values() ?? []) {
      if (
        key.status === 'ACTIVE' &&
        key.version >= min &&
        key.aead.algorithm === policy.algorithm &&
        key.version > (newest?.version ?? 0)
      ) {
        newest = key;
      }
    }
    if (!newest) {
      return errors.policyNotUsable(
        policy.policyCode,
        `has no active ${policy.algorithm} key under alias ${policy.keyAlias}`,
      );
    }
    const header = encodeHeader(ALGORITHM_IDS[policy.algorithm], newest.version);
    return { policy, key: newest, header, aad: associatedData(policy.policyCode, header) };
  }
}
