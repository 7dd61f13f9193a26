// The snapshot store's drizzle schema: runtime identity, runtime state, policies, keys (material
// wrapped under the master key, never raw) and per key version usage counters. Every row is scoped by
// engine id so several engines may share one PostgreSQL store. drizzle-kit generates the migrations
// in engine/drizzle/migrations from this file; the same migrations run on PGlite and PostgreSQL.
import { bigint, customType, pgSchema, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

/** A dedicated schema keeps the engine's tables apart from application tables in a shared database. */
export const svcEngine = pgSchema('svc_engine');

const bytea = customType<{ data: Uint8Array; driverData: Uint8Array }>({
  dataType: () => 'bytea',
});

// Versions and counters may exceed int4 (key versions go up to 2^32 - 1), hence bigint everywhere.
const u32 = (name: string) => bigint(name, { mode: 'number' });
const updatedAt = () => timestamp('updated_at', { withTimezone: true }).notNull().defaultNow();

export const runtimeIdentity = svcEngine.table('runtime_identity', {
  engineId: text('engine_id').primaryKey(),
  hubUrl: text('hub_url').notNull(),
  tenantId: text('tenant_id').notNull(),
  registeredAt: timestamp('registered_at', { withTimezone: true }).notNull().defaultNow(),
  updatedAt: updatedAt(),
});

export const runtimeState = svcEngine.table('runtime_state', {
  engineId: text('engine_id').primaryKey(),
  runtimeVersion: text('runtime_version').notNull().default(''),
  /** HMAC of a fixed label under the master key: detects a store opened with the wrong master key. */
  masterKeyCheck: text('master_key_check').notNull(),
  lastHeartbeatAt: timestamp('last_heartbeat_at', { withTimezone: true }),
  lastSyncAt: timestamp('last_sync_at', { withTimezone: true }),
  /** What the stored snapshot must hold (runtime-merge.ts summarize): checked at load to catch a damaged store. */
  snapshotDigest: text('snapshot_digest'),
  policyCount: bigint('policy_count', { mode: 'number' }),
  keyCount: bigint('key_count', { mode: 'number' }),
  updatedAt: updatedAt(),
});

export const policies = svcEngine.table(
  'policies',
  {
    engineId: text('engine_id').notNull(),
    policyCode: text('policy_code').notNull(),
    policyName: text('policy_name').notNull(),
    policyVersion: u32('policy_version').notNull(),
    algorithm: text('algorithm').notNull(),
    keyAlias: text('key_alias').notNull(),
    status: text('status').notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.engineId, t.policyCode] })],
);

export const keys = svcEngine.table(
  'keys',
  {
    engineId: text('engine_id').notNull(),
    alias: text('alias').notNull(),
    version: u32('version').notNull(),
    algorithm: text('algorithm').notNull(),
    /** ACTIVE, DECRYPT_ONLY, DISABLED, RETIRED, or DESTROYED (material erased: empty wrapped_material). */
    status: text('status').notNull(),
    /** RFC 5649 wrap of the key material under the engine's master key. */
    wrappedMaterial: bytea('wrapped_material').notNull(),
    /** When the version entered its status (the destroy grace period counts from here). */
    statusSince: timestamp('status_since', { withTimezone: true }),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.engineId, t.alias, t.version] })],
);

export const keyUsage = svcEngine.table(
  'key_usage',
  {
    engineId: text('engine_id').notNull(),
    alias: text('alias').notNull(),
    version: u32('version').notNull(),
    encryptions: bigint('encryptions', { mode: 'number' }).notNull().default(0),
    decryptions: bigint('decryptions', { mode: 'number' }).notNull().default(0),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.engineId, t.alias, t.version] })],
);

/** Per key alias settings: the minimum decryption version (set by the hub's key records or an operator). */
export const keyAliases = svcEngine.table(
  'key_aliases',
  {
    engineId: text('engine_id').notNull(),
    alias: text('alias').notNull(),
    minDecryptionVersion: u32('min_decryption_version').notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.engineId, t.alias] })],
);
