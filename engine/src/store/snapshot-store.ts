// Reads and writes the engine's persisted runtime: identity, the policy and key snapshot (keys wrapped
// under the master key), the runtime state and the usage counters. Each write is one transaction, so
// a crash leaves either the previous snapshot or the new one, never a mix.
import { eq, sql } from 'drizzle-orm';
import type { Algorithm } from '../core/aead.js';
import { unwrapKey, wrapKey } from '../core/key-wrap.js';
import type { DestroyedKey, HeldStatus, KeyRecord, PolicyRecord } from '../core/records.js';
import { type ContentSummary, summarize } from '../core/runtime-merge.js';
import type { SnapshotContent } from '../core/runtime-snapshot.js';
import { runInSlices } from '../core/time-slices.js';
import type { UsageEntry } from '../core/usage-counters.js';
import { MasterKeyError, masterKeyCheck } from './master-key.js';
import type { OpenedDb, StoreDb, StoreDriver } from './open-store.js';
import { keyAliases, keys, keyUsage, policies, runtimeIdentity, runtimeState } from './schema.js';
import { StoreIntegrityError } from './store-protocol.js';

export { StoreIntegrityError };

/** The rows one change writes (see CacheManager.apply). */
export interface StoreChange {
  readonly policies: readonly PolicyRecord[];
  readonly keys: readonly KeyRecord[];
  readonly destroyed: readonly DestroyedKey[];
  readonly minimums: readonly [alias: string, min: number][];
  readonly runtimeVersion: string;
  readonly summary: ContentSummary;
}

export interface RuntimeIdentity {
  readonly hubUrl: string;
  readonly tenantId: string;
}

export interface StoredRuntime {
  readonly identity: RuntimeIdentity | null;
  /** The last saved snapshot; empty (runtimeVersion '') when nothing was ever synced. */
  readonly snapshot: SnapshotContent;
  readonly lastHeartbeatAt: Date | null;
  readonly lastSyncAt: Date | null;
  readonly usage: readonly UsageEntry[];
}

// Keeps each INSERT well below PostgreSQL's 65535 bind parameters.
const CHUNK = 1000;

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += CHUNK) out.push(items.slice(i, i + CHUNK));
  return out;
}

export class SnapshotStore {
  readonly driver: StoreDriver;
  readonly location: string;
  readonly #db: StoreDb;
  readonly #opened: OpenedDb;

  constructor(
    opened: OpenedDb,
    readonly engineId: string,
    readonly masterKey: Uint8Array,
  ) {
    this.#opened = opened;
    this.#db = opened.db;
    this.driver = opened.driver;
    this.location = opened.location;
  }

  /** Loads everything persisted for this engine; refuses a store written under another master key or damaged. */
  async load(): Promise<StoredRuntime> {
    const db = this.#db;
    const check = masterKeyCheck(this.masterKey);
    await db.insert(runtimeState).values({ engineId: this.engineId, masterKeyCheck: check }).onConflictDoNothing();
    const [state] = await db.select().from(runtimeState).where(eq(runtimeState.engineId, this.engineId));
    if (!state || state.masterKeyCheck !== check) {
      throw new MasterKeyError('the master key does not match the one this snapshot store was written with');
    }
    const [identity] = await db.select().from(runtimeIdentity).where(eq(runtimeIdentity.engineId, this.engineId));
    const policyRows = await db.select().from(policies).where(eq(policies.engineId, this.engineId));
    const keyRows = await db.select().from(keys).where(eq(keys.engineId, this.engineId));
    const aliasRows = await db.select().from(keyAliases).where(eq(keyAliases.engineId, this.engineId));
    const usageRows = await db.select().from(keyUsage).where(eq(keyUsage.engineId, this.engineId));
    const destroyed: DestroyedKey[] = [];
    const liveKeys: KeyRecord[] = [];
    for (const row of keyRows) {
      if (row.status === 'DESTROYED') {
        destroyed.push({
          alias: row.alias,
          version: row.version,
          algorithm: row.algorithm as Algorithm,
          destroyedAt: (row.statusSince ?? row.updatedAt).getTime(),
        });
        continue;
      }
      const material = unwrapKey(this.masterKey, row.wrappedMaterial);
      if (!material) throw new MasterKeyError(`stored key ${row.alias} version ${row.version} does not unwrap`);
      liveKeys.push({
        alias: row.alias,
        version: row.version,
        algorithm: row.algorithm as Algorithm,
        status: row.status as HeldStatus,
        material,
        statusSince: (row.statusSince ?? row.updatedAt).getTime(),
      });
    }
    const snapshot: SnapshotContent = {
      runtimeVersion: state.runtimeVersion,
      policies: policyRows.map(
        (row): PolicyRecord => ({
          policyCode: row.policyCode,
          policyName: row.policyName,
          policyVersion: row.policyVersion,
          algorithm: row.algorithm as Algorithm,
          keyAlias: row.keyAlias,
          status: row.status as HeldStatus,
        }),
      ),
      keys: liveKeys,
      destroyed,
      minDecryptionVersions: new Map(aliasRows.map((row) => [row.alias, row.minDecryptionVersion])),
    };
    await this.#checkIntegrity(state, snapshot);
    return {
      identity: identity ? { hubUrl: identity.hubUrl, tenantId: identity.tenantId } : null,
      snapshot,
      lastHeartbeatAt: state.lastHeartbeatAt,
      lastSyncAt: state.lastSyncAt,
      usage: usageRows.map((row) => ({
        alias: row.alias,
        version: row.version,
        encryptions: row.encryptions,
        decryptions: row.decryptions,
        reserved: row.encryptions,
      })),
    };
  }

  /** A store whose rows no longer match what was last written (truncated, edited, half restored) is refused. */
  async #checkIntegrity(
    state: { runtimeVersion: string; snapshotDigest: string | null; policyCount: number | null; keyCount: number | null },
    snapshot: SnapshotContent,
  ): Promise<void> {
    if (state.snapshotDigest === null) return; // written before digests existed, or never written
    const found = await runInSlices(summarize(snapshot));
    const problems: string[] = [];
    if (state.policyCount !== found.policyCount) problems.push(`${found.policyCount} policies instead of ${state.policyCount}`);
    if (state.keyCount !== found.keyCount) problems.push(`${found.keyCount} key versions instead of ${state.keyCount}`);
    if (problems.length === 0 && state.snapshotDigest !== found.digest) problems.push('records that differ from the ones last written');
    if (problems.length === 0) return;
    throw new StoreIntegrityError(
      `the snapshot store at ${this.location} (engine id ${this.engineId}) is damaged: it holds ${problems.join(' and ')} ` +
        `(runtime version "${state.runtimeVersion}"). Refusing to start rather than serve a partial runtime. ` +
        'Ways back: restore the store from a backup; or resync from the hub by resetting the runtime version ' +
        `(UPDATE svc_engine.runtime_state SET runtime_version = '', snapshot_digest = NULL WHERE engine_id = '${this.engineId}'); ` +
        'or start from a bootstrap file (SVC_BOOTSTRAP_FILE) with the same reset. See docs/operations.md#damaged-store.',
    );
  }

  /**
   * Writes one change in one transaction: the rows that changed (upserted), the runtime version and
   * the summary of the whole content. Work is proportional to the change, not to the runtime.
   */
  async saveChanges(change: StoreChange, syncedAt: Date | null, replace = false): Promise<void> {
    const engineId = this.engineId;
    const policyRows = change.policies.map((p) => ({ engineId, ...p, updatedAt: sql`now()` }));
    const keyRows: (typeof keys.$inferInsert)[] = [];
    for (const k of change.keys) {
      keyRows.push({
        engineId,
        alias: k.alias,
        version: k.version,
        algorithm: k.algorithm,
        status: k.status,
        wrappedMaterial: wrapKey(this.masterKey, k.material),
        statusSince: new Date(k.statusSince ?? Date.now()),
      });
      // Wrapping is CPU work: let requests through between chunks of a large import.
      if (keyRows.length % CHUNK === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    for (const d of change.destroyed) {
      keyRows.push({
        engineId,
        alias: d.alias,
        version: d.version,
        algorithm: d.algorithm,
        status: 'DESTROYED',
        wrappedMaterial: new Uint8Array(0),
        statusSince: new Date(d.destroyedAt),
      });
    }
    const aliasRows = change.minimums.map(([alias, min]) => ({ engineId, alias, minDecryptionVersion: min }));
    await this.#db.transaction(async (tx) => {
      if (replace) {
        await tx.delete(policies).where(eq(policies.engineId, engineId));
        await tx.delete(keys).where(eq(keys.engineId, engineId));
        await tx.delete(keyAliases).where(eq(keyAliases.engineId, engineId));
      }
      for (const rows of chunks(policyRows)) {
        await tx
          .insert(policies)
          .values(rows)
          .onConflictDoUpdate({
            target: [policies.engineId, policies.policyCode],
            set: {
              policyName: sql`excluded.policy_name`,
              policyVersion: sql`excluded.policy_version`,
              algorithm: sql`excluded.algorithm`,
              keyAlias: sql`excluded.key_alias`,
              status: sql`excluded.status`,
              updatedAt: sql`now()`,
            },
          });
      }
      for (const rows of chunks(keyRows)) {
        await tx
          .insert(keys)
          .values(rows)
          .onConflictDoUpdate({
            target: [keys.engineId, keys.alias, keys.version],
            set: {
              algorithm: sql`excluded.algorithm`,
              status: sql`excluded.status`,
              wrappedMaterial: sql`excluded.wrapped_material`,
              statusSince: sql`excluded.status_since`,
              updatedAt: sql`now()`,
            },
          });
      }
      for (const rows of chunks(aliasRows)) {
        await tx
          .insert(keyAliases)
          .values(rows)
          .onConflictDoUpdate({
            target: [keyAliases.engineId, keyAliases.alias],
            set: { minDecryptionVersion: sql`excluded.min_decryption_version`, updatedAt: sql`now()` },
          });
      }
      await tx
        .update(runtimeState)
        .set({
          runtimeVersion: change.runtimeVersion,
          snapshotDigest: change.summary.digest,
          policyCount: change.summary.policyCount,
          keyCount: change.summary.keyCount,
          ...(syncedAt ? { lastSyncAt: syncedAt } : {}),
          updatedAt: sql`now()`,
        })
        .where(eq(runtimeState.engineId, engineId));
    });
  }

  /** Replaces the whole stored snapshot with `content` in one transaction (restores, tests). */
  async saveSnapshot(content: SnapshotContent, syncedAt: Date): Promise<void> {
    const summary = await runInSlices(summarize(content));
    await this.saveChanges(
      {
        policies: content.policies,
        keys: content.keys,
        destroyed: content.destroyed ?? [],
        minimums: [...(content.minDecryptionVersions ?? [])],
        runtimeVersion: content.runtimeVersion,
        summary,
      },
      syncedAt,
      true,
    );
  }

  async saveIdentity(identity: RuntimeIdentity): Promise<void> {
    await this.#db
      .insert(runtimeIdentity)
      .values({ engineId: this.engineId, ...identity })
      .onConflictDoUpdate({
        target: runtimeIdentity.engineId,
        set: { hubUrl: identity.hubUrl, tenantId: identity.tenantId, updatedAt: sql`now()` },
      });
  }

  /** Writes the heartbeat time and the usage counters (absolute values) in one transaction. */
  async saveState(state: { lastHeartbeatAt: Date | null; usage: readonly UsageEntry[] }): Promise<void> {
    const engineId = this.engineId;
    await this.#db.transaction(async (tx) => {
      if (state.lastHeartbeatAt) {
        await tx
          .update(runtimeState)
          .set({ lastHeartbeatAt: state.lastHeartbeatAt, updatedAt: sql`now()` })
          .where(eq(runtimeState.engineId, engineId));
      }
      for (const rows of chunks(state.usage)) {
        await tx
          .insert(keyUsage)
          .values(
            rows.map((u) => ({
              engineId,
              alias: u.alias,
              version: u.version,
              // The reservation mark, never less than the real count: a crash may over-count, never under-count.
              encryptions: Math.max(u.encryptions, u.reserved ?? 0),
              decryptions: u.decryptions,
            })),
          )
          .onConflictDoUpdate({
            target: [keyUsage.engineId, keyUsage.alias, keyUsage.version],
            // Counters only grow: a stale writer never moves them back.
            set: {
              encryptions: sql`greatest(${keyUsage.encryptions}, excluded.encryptions)`,
              decryptions: sql`greatest(${keyUsage.decryptions}, excluded.decryptions)`,
              updatedAt: sql`now()`,
            },
          });
      }
    });
  }

  /** Persists usage reservation marks (absolute values; they only grow). */
  async saveUsage(usage: readonly UsageEntry[]): Promise<void> {
    await this.saveState({ lastHeartbeatAt: null, usage });
  }

  async ping(): Promise<void> {
    await this.#db.execute(sql`select 1`);
  }

  close(): Promise<void> {
    return this.#opened.close();
  }
}
