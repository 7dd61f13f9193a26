// The operations API (`/engine/api/v1`, on the operations listener) for automation: a thin typed layer
// over registration, runtime information, the cache and syncs. Every call but the first registration
// carries the tenant header.
import { Transport, type TransportOptions } from './http.js';

export interface OperationsClientOptions extends TransportOptions {
  /** The engine's tenant (`X-SVC-Tenant-ID`); the operations API's credential once registered. */
  readonly tenantId: string;
}

export interface RuntimeIdentity {
  readonly hubUrl: string;
  readonly tenantId: string;
}

export interface RuntimeInfo {
  readonly engineVersion: string;
  readonly status: 'UNREGISTERED' | 'OFFLINE' | 'ONLINE';
  readonly providerFamily: string;
  readonly capabilities: string[];
  readonly runtimeVersion: string | null;
  readonly hubUrl: string | null;
  readonly cache: CacheStatus;
  readonly lastHeartbeatAt: string | null;
  readonly lastSyncAt: string | null;
  readonly lastHeartbeatError: string | null;
  readonly lastApplyError: string | null;
  readonly store: { readonly driver: string; readonly available: boolean; readonly lastError: string | null };
  readonly keyUsage: {
    readonly alias: string;
    readonly version: number;
    readonly algorithm: string;
    readonly encryptions: number;
    readonly decryptions: number;
    readonly nearLimit: boolean;
  }[];
  readonly keyUsageWarning: boolean;
  /** Fields added by later engine versions. */
  readonly [field: string]: unknown;
}

export interface CacheStatus {
  readonly policyCount: number;
  readonly keyCount: number;
}

export interface HeartbeatResult {
  readonly success: boolean;
  readonly runtimeVersion: string | null;
  readonly runtimeChanged: boolean;
  readonly applied: boolean;
  readonly policyCount: number;
  readonly keyCount: number;
}

export interface SyncResult {
  readonly success: true;
  /** Entries applied. */
  readonly count: number;
}

export interface SyncCheck {
  readonly inSync: boolean;
  readonly local: { readonly runtimeVersion: string | null; readonly policyCount: number; readonly keyCount: number };
  readonly hub: { readonly runtimeVersion: string | null; readonly policyCount: number; readonly keyCount: number };
  readonly policies: { readonly missing: string[]; readonly unexpected: string[]; readonly different: string[] };
  readonly keys: { readonly missing: string[]; readonly unexpected: string[]; readonly different: string[] };
  readonly checkedAt: string;
}

/** Policy and key records as the hub sends them (docs/hub-protocol.md#records). */
export type SyncRecord = Readonly<Record<string, unknown>>;

export class OperationsClient {
  private readonly transport: Transport;

  /** `baseUrl`: the operations listener, e.g. `http://127.0.0.1:8081`. */
  constructor(baseUrl: string, options: OperationsClientOptions) {
    if (!options.tenantId) throw new RangeError('tenantId is required');
    this.transport = new Transport(baseUrl, {
      ...options,
      headers: { ...options.headers, 'X-SVC-Tenant-ID': options.tenantId },
    });
  }

  /** Registers the engine with a hub (the first registration needs no tenant header; it is sent anyway). */
  register(identity: RuntimeIdentity, registrationToken?: string): Promise<{ success: true }> {
    return this.post('/runtime/identity', identity, registrationToken ? { 'X-SVC-Registration-Token': registrationToken } : {});
  }

  runtimeInfo(): Promise<RuntimeInfo> {
    return this.get('/runtime/info');
  }

  heartbeat(): Promise<HeartbeatResult> {
    return this.post('/runtime/heartbeat', {});
  }

  cacheStatus(): Promise<CacheStatus> {
    return this.get('/cache/status');
  }

  /** Retires every policy and key until the next sync (ciphertexts keep decrypting). */
  clearCache(): Promise<{ success: true }> {
    return this.post('/cache/clear', {});
  }

  /** Compares the cache with the hub's manifest. */
  syncCheck(): Promise<SyncCheck> {
    return this.get('/cache/sync-check');
  }

  /** Upserts policies by code. */
  syncPolicies(policies: readonly SyncRecord[], runtimeVersion?: string): Promise<SyncResult> {
    return this.post('/cache/policies/sync', { policies, ...(runtimeVersion === undefined ? {} : { runtimeVersion }) });
  }

  /** Replaces the policy set: policies not listed become RETIRED. */
  syncAllPolicies(policies: readonly SyncRecord[], runtimeVersion?: string): Promise<SyncResult> {
    return this.post('/cache/policies/sync-all', { policies, ...(runtimeVersion === undefined ? {} : { runtimeVersion }) });
  }

  /** Upserts key versions by alias and version. */
  syncKeys(keys: readonly SyncRecord[], runtimeVersion?: string): Promise<SyncResult> {
    return this.post('/cache/keys/sync', { keys, ...(runtimeVersion === undefined ? {} : { runtimeVersion }) });
  }

  /** Replaces the key set: versions not listed become RETIRED (never deleted). */
  syncAllKeys(keys: readonly SyncRecord[], runtimeVersion?: string): Promise<SyncResult> {
    return this.post('/cache/keys/sync-all', { keys, ...(runtimeVersion === undefined ? {} : { runtimeVersion }) });
  }

  private async get<T>(path: string): Promise<T> {
    const answer = await this.transport.send(`/engine/api/v1${path}`, { method: 'GET' });
    return JSON.parse(new TextDecoder().decode(answer.body)) as T;
  }

  private async post<T>(path: string, body: unknown, headers: Record<string, string> = {}): Promise<T> {
    const answer = await this.transport.send(`/engine/api/v1${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return JSON.parse(new TextDecoder().decode(answer.body)) as T;
  }
}
