// An immutable view of the runtime cache: policies by code and by name/version, keys by alias and
// version, and what encryption under each policy needs, prepared once per snapshot so the hot path
// is a map lookup. A batch takes one snapshot and sees one consistent view even if a sync lands.
import { type AeadKey, ALGORITHM_IDS, importKey } from './aead.js';
import { associatedData, encodeHeader } from './ciphertext-envelope.js';
import { type EngineError, errors } from './errors.js';
import type { KeyRecord, PolicyRecord } from './records.js';
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
}

/**
 * Consistency rules across records, checked before any snapshot is persisted or served: a policy name
 * and version names one policy, and every key under a policy's alias has the policy's algorithm.
 */
export function checkSnapshotContent(content: SnapshotContent): void {
  const named = new Map<string, string>();
  for (const p of content.policies) {
    const id = `${p.policyName}\u0000${p.policyVersion}`;
    const other = named.get(id);
    if (other !== undefined && other !== p.policyCode) {
      throw errors.operationInvalid(`policies ${other} and ${p.policyCode} are both ${p.policyName} version ${p.policyVersion}`);
    }
    named.set(id, p.policyCode);
  }
  for (const p of content.policies) {
    const mismatch = content.keys.find((k) => k.alias === p.keyAlias && k.algorithm !== p.algorithm);
    if (mismatch) {
      throw errors.operationInvalid(
        `key ${mismatch.alias} version ${mismatch.version} is ${mismatch.algorithm} but policy ${p.policyCode} using it is ${p.algorithm}`,
      );
    }
  }
}

export class RuntimeSnapshot implements SnapshotContent {
  readonly policies: readonly PolicyRecord[];
  readonly keys: readonly KeyRecord[];
  readonly runtimeVersion: string;
  readonly #byCode = new Map<string, PolicyRecord>();
  readonly #byName = new Map<string, PolicyRecord[]>();
  readonly #keys = new Map<string, Map<number, PreparedKey>>();
  readonly #encrypt = new Map<string, EncryptContext | EngineError>();

  constructor(content: SnapshotContent, counters: UsageCounters) {
    checkSnapshotContent(content);
    this.policies = Object.freeze([...content.policies]);
    this.keys = Object.freeze([...content.keys]);
    this.runtimeVersion = content.runtimeVersion;
    for (const key of this.keys) {
      const versions = this.#keys.get(key.alias) ?? new Map<number, PreparedKey>();
      this.#keys.set(key.alias, versions);
      versions.set(key.version, {
        alias: key.alias,
        version: key.version,
        status: key.status,
        aead: importKey(key.algorithm, key.material),
        usage: counters.cell(key.alias, key.version),
      });
    }
    for (const policy of this.policies) {
      this.#byCode.set(policy.policyCode, policy);
      const named = this.#byName.get(policy.policyName) ?? [];
      named.push(policy);
      this.#byName.set(policy.policyName, named);
      this.#encrypt.set(policy.policyCode, this.#prepareEncrypt(policy));
    }
    for (const named of this.#byName.values()) named.sort((a, b) => a.policyVersion - b.policyVersion);
  }

  static empty(counters: UsageCounters): RuntimeSnapshot {
    return new RuntimeSnapshot({ policies: [], keys: [], runtimeVersion: '' }, counters);
  }

  get policyCount(): number {
    return this.policies.length;
  }

  get keyCount(): number {
    return this.keys.length;
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

  /** The prepared encryption context of a policy, or the error explaining why it cannot encrypt. */
  encryptContext(policy: PolicyRecord): EncryptContext | EngineError {
    return this.#encrypt.get(policy.policyCode) ?? errors.policyNotFound(policy.policyCode);
  }

  #prepareEncrypt(policy: PolicyRecord): EncryptContext | EngineError {
    if (policy.status !== 'ACTIVE') {
      return errors.policyNotUsable(
        policy.policyCode,
        policy.status === 'DISABLED' ? 'is disabled' : 'is decrypt-only',
      );
    }
    let newest: PreparedKey | undefined;
    for (const key of this.#keys.get(policy.keyAlias)?.values() ?? []) {
      if (key.status === 'ACTIVE' && key.aead.algorithm === policy.algorithm && key.version > (newest?.version ?? 0)) {
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
