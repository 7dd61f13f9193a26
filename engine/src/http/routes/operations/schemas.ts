// Response schemas of the operations API (docs/api.md): they document it and make sure nothing
// beyond these fields is ever serialized.
import { Type } from 'typebox';

export const SuccessBody = Type.Object({ success: Type.Boolean() });
export const SyncResult = Type.Object({ success: Type.Boolean(), count: Type.Integer() });
export const CacheStatus = Type.Object({ policyCount: Type.Integer(), keyCount: Type.Integer() });
export const ErrorBody = Type.Object({ success: Type.Optional(Type.Literal(false)), error: Type.String() });

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);

export const KeyUsage = Type.Object({
  alias: Type.String(),
  version: Type.Integer(),
  algorithm: Nullable(Type.String()),
  encryptions: Type.Integer(),
  decryptions: Type.Integer(),
  nearLimit: Type.Boolean(),
});

export const RuntimeInfo = Type.Object({
  engineVersion: Type.String(),
  status: Type.Union([Type.Literal('UNREGISTERED'), Type.Literal('OFFLINE'), Type.Literal('ONLINE')]),
  providerFamily: Type.String(),
  capabilities: Type.Array(Type.String()),
  runtimeVersion: Type.String(),
  hubUrl: Nullable(Type.String()),
  cache: CacheStatus,
  lastHeartbeatAt: Nullable(Type.String()),
  lastSyncAt: Nullable(Type.String()),
  lastHeartbeatError: Nullable(Type.String()),
  lastApplyError: Nullable(Type.String()),
  store: Type.Object({ driver: Type.String(), available: Type.Boolean(), lastError: Nullable(Type.String()) }),
  keyUsage: Type.Array(KeyUsage),
  keyUsageWarning: Type.Boolean(),
  /** Records the hub no longer lists, kept for decryption (docs/operations.md#key-and-policy-states). */
  retired: CacheStatus,
  destroyedKeys: Type.Array(Type.Object({ alias: Type.String(), version: Type.Integer(), destroyedAt: Type.String() })),
  minDecryptionVersions: Type.Array(Type.Object({ alias: Type.String(), minDecryptionVersion: Type.Integer() })),
  heldBackSnapshot: Nullable(
    Type.Object({
      runtimeVersion: Type.String(),
      reason: Type.String(),
      policyCount: Type.Integer(),
      keyCount: Type.Integer(),
      retiredPolicies: Type.Integer(),
      retiredKeys: Type.Integer(),
      heldAt: Type.String(),
    }),
  ),
});

export const KeyActResult = Type.Object({
  success: Type.Boolean(),
  alias: Type.String(),
  version: Type.Integer(),
  status: Type.String(),
});

export const HeldBackApplied = Type.Object({ success: Type.Boolean(), runtimeVersion: Type.String() });

export const HeartbeatResult = Type.Object({
  success: Type.Boolean(),
  runtimeVersion: Type.String(),
  runtimeChanged: Type.Boolean(),
  applied: Type.Boolean(),
  policyCount: Type.Integer(),
  keyCount: Type.Integer(),
});

const Differences = Type.Object({
  missing: Type.Array(Type.String()),
  unexpected: Type.Array(Type.String()),
  different: Type.Array(Type.String()),
});
const Side = Type.Object({ runtimeVersion: Type.String(), policyCount: Type.Integer(), keyCount: Type.Integer() });

export const SyncCheck = Type.Object({
  inSync: Type.Boolean(),
  local: Side,
  hub: Side,
  policies: Differences,
  keys: Differences,
  checkedAt: Type.String(),
});

export const TestConnection = Type.Object({
  success: Type.Boolean(),
  statsTargetUrl: Type.String(),
  reachable: Type.Boolean(),
  error: Nullable(Type.String()),
});

export const errorResponses = Object.fromEntries([400, 401, 404, 409, 415, 502, 503].map((s) => [s, ErrorBody])) as Record<
  400 | 401 | 404 | 409 | 415 | 502 | 503,
  typeof ErrorBody
>;
