// Reads and writes the engine's persisted runtime: identity, the policy and key snapshot (keys wrapped
// under the master key), the runtime state and the usage counters. Each write is one transaction, so
// a crash leaves either the previous snapshot or the new one, never a mix.
import { eq, sql } from 'drizzle-orm';
import type { Algorithm } from '../core/aead.js';
import { unwrapKey, wrapKey } from '../core/key-wrap.js';
import type { KeyRecord, PolicyRecord, RecordStatus } from '../core/records.js';
import type { SnapshotContent } from '../core/runtime-snapshot.js';
import type { UsageEntry } from '../core/usage-counters.js';
import { MasterKeyError, masterKeyCheck } from './master-key.js';
import type { OpenedDb, StoreDb, StoreDriver } from './open-store.js';
import { keys, keyUsage, policies, runtimeIdentity, runtimeState } from './schema.js';

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

  /** Loads everything persisted for this engine; refuses a store written under another master key. */
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
    const usageRows = await db.select().from(keyUsage).where(eq(keyUsage.engineId, this.engineId));
    return {
      identity: identity ? { hubUrl: identity.hubUrl, tenantId: identity.tenantId } : null,
      snapshot: {
        runtimeVersion: state.runtimeVersion,
        policies: policyRows.map(
          (row): PolicyRecord => ({
            policyCode: row.policyCode,
            policyName: row.policyName,
            policyVersion: row.policyVersion,
            algorithm: row.algorithm as Algorithm,
            keyAlias: row.keyAlias,
            status: row.status as RecordStatus,
          }),
        ),
        keys: keyRows.map((row): KeyRecord => {
          const material = unwrapKey(this.masterKey, row.wrappedMaterial);
          if (!material) throw new MasterKeyError(`stored key ${row.alias} version ${row.version} does not unwrap`);
          return {
            alias: row.alias,
            version: row.version,
            algorithm: row.algorithm as Algorithm,
            status: row.status as RecordStatus,
            material,
          };
        }),
      },
      lastHeartbeatAt: state.lastHeartbeatAt,
      lastSyncAt: state.lastSyncAt,
      usage: usageRows.map((row) => ({
        alias: row.alias,
        version: row.version,
        encryptions: row.encryptions,
        decryptions: row.decryptions,
      })),
    };
  }

  /** Replaces the stored snapshot with `content` in one transaction. */
  async saveSnapshot(content: SnapshotContent, syncedAt: Date): Promise<void> {
    const engineId = this.engineId;
    const policyRows = content.policies.map((p) => ({ engineId, ...p }));
    const keyRows = content.keys.map((k) => ({
      engineId,
      alias: k.alias,
      version: k.version,
      algorithm: k.algorithm,
      status: k.status,
      wrappedMaterial: wrapKey(this.masterKey, k.material),
    }));
    await this.#db.transaction(async (tx) => {
      await tx.delete(policies).where(eq(policies.engineId, engineId));
      await tx.delete(keys).where(eq(keys.engineId, engineId));
      for (const rows of chunks(policyRows)) await tx.insert(policies).values(rows);
      for (const rows of chunks(keyRows)) await tx.insert(keys).values(rows);
      await tx
        .update(runtimeState)
        .set({ runtimeVersion: content.runtimeVersion, lastSyncAt: syncedAt, updatedAt: sql`now()` })
        .where(eq(runtimeState.engineId, engineId));
    });
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
          .values(rows.map((u) => ({ engineId, ...u })))
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

  async ping(): Promise<void> {
    await this.#db.execute(sql`select 1`);
  }

  close(): Promise<void> {
    return this.#opened.close();
  }
}
