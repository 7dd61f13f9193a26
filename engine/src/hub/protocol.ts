// The hub protocol (docs/hub-protocol.md) as types and checks, shared by the engine's hub client and
// the reference hub so the two cannot drift. The engine calls the hub for heartbeats and manifests;
// the hub calls the engine's operations API for registration and syncs with the record shapes below.
import { createHmac } from 'node:crypto';
import type { Algorithm } from '../core/aead.js';
import type { HeldStatus as RecordStatus } from '../core/records.js';

export const TENANT_HEADER = 'x-svc-tenant-id';
/** Carries SVC_REGISTRATION_TOKEN on the first registration of an engine that requires one. */
export const REGISTRATION_TOKEN_HEADER = 'x-svc-registration-token';

export const HUB_PATHS = {
  heartbeat: '/hub/api/v1/runtime/heartbeat',
  manifest: '/hub/api/v1/runtime/manifest',
  health: '/hub/health',
} as const;

export type EngineStatus = 'UNREGISTERED' | 'OFFLINE' | 'ONLINE';

/** A policy as the hub sends it in syncs and heartbeat snapshots. */
export interface PolicySyncRecord {
  policyCode: string;
  policyName: string;
  policyVersion: number;
  algorithm: Algorithm;
  keyAlias: string;
  status: RecordStatus;
}

/** A key version as the hub sends it: material wrapped (RFC 5649, base64) under the engine's master key. */
export interface KeySyncRecord {
  alias: string;
  version: number;
  algorithm: Algorithm;
  status: RecordStatus;
  /** Versions of this alias below it refuse to decrypt (optional; the highest value in a sync wins). */
  minDecryptionVersion?: number;
  wrappedMaterial?: string;
  /** Raw base64 material: accepted only by an engine that allows it (development). */
  material?: string;
}

export interface KeyUsageMetric {
  alias: string;
  version: number;
  algorithm: Algorithm | null;
  encryptions: number;
  decryptions: number;
  nearLimit: boolean;
}

export interface CryptoMetrics {
  keys: KeyUsageMetric[];
  totalEncryptions: number;
  totalDecryptions: number;
  /** True when any GCM key version has reached the warning threshold. */
  nearLimit: boolean;
}

export interface HeartbeatRequest {
  tenantId: string;
  engineVersion: string;
  /** The runtime version the engine has persisted and serves ('' when it has none). */
  runtimeVersion: string;
  status: EngineStatus;
  sentAt: string;
  cache: { policyCount: number; keyCount: number };
  cryptoMetrics: CryptoMetrics;
}

export interface RuntimePayload {
  policies: PolicySyncRecord[];
  keys: KeySyncRecord[];
}

export interface HeartbeatResponse {
  runtimeVersion: string;
  /** True when the engine's runtimeVersion differs from the hub's; `snapshot` is then present. */
  runtimeChanged: boolean;
  snapshot?: RuntimePayload;
  serverTime: string;
}

export interface ManifestKey {
  alias: string;
  version: number;
  algorithm: Algorithm;
  status: RecordStatus;
  /** Key check value: identifies the material without revealing it (see keyCheckValue). */
  kcv: string;
}

export interface RuntimeManifest {
  runtimeVersion: string;
  policies: PolicySyncRecord[];
  keys: ManifestKey[];
}

/** First 8 bytes of HMAC-SHA256 keyed by the material over a fixed label, in hex. */
export function keyCheckValue(material: Uint8Array): string {
  return createHmac('sha256', material).update('svc-engine key check v1').digest('hex').slice(0, 16);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Checks the envelope of a heartbeat answer; the records inside are parsed by the engine's record parsers. */
export function checkHeartbeatResponse(body: unknown): HeartbeatResponse {
  if (!isObject(body)) throw new Error('heartbeat answer is not a JSON object');
  const { runtimeVersion, runtimeChanged, snapshot, serverTime } = body;
  if (typeof runtimeVersion !== 'string') throw new Error('heartbeat answer lacks runtimeVersion');
  if (typeof runtimeChanged !== 'boolean') throw new Error('heartbeat answer lacks runtimeChanged');
  if (runtimeChanged) {
    if (!isObject(snapshot) || !Array.isArray(snapshot.policies) || !Array.isArray(snapshot.keys)) {
      throw new Error('heartbeat answer says the runtime changed but carries no snapshot');
    }
  }
  return {
    runtimeVersion,
    runtimeChanged,
    snapshot: runtimeChanged ? (snapshot as unknown as RuntimePayload) : undefined,
    serverTime: typeof serverTime === 'string' ? serverTime : '',
  };
}

export function checkManifest(body: unknown): RuntimeManifest {
  if (!isObject(body)) throw new Error('manifest is not a JSON object');
  const { runtimeVersion, policies, keys } = body;
  if (typeof runtimeVersion !== 'string' || !Array.isArray(policies) || !Array.isArray(keys)) {
    throw new Error('manifest lacks runtimeVersion, policies or keys');
  }
  for (const p of policies)
    if (!isObject(p) || typeof p.policyCode !== 'string') throw new Error('manifest policy without policyCode');
  for (const k of keys) {
    if (!isObject(k) || typeof k.alias !== 'string' || typeof k.version !== 'number')
      throw new Error('manifest key without alias and version');
  }
  return body as unknown as RuntimeManifest;
}
