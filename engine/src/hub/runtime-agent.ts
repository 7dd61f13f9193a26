// The engine's side of the hub: its runtime identity (registration rules of the operations API), its
// status (UNREGISTERED, OFFLINE, ONLINE), the heartbeat that reports usage and applies the hub's
// snapshot when the runtime changed (or holds it back), and the sync check against the hub's manifest.
import { createHash, timingSafeEqual } from 'node:crypto';
import { EngineError, errors } from '../core/errors.js';
import { parseHttpUrl } from '../core/http-url.js';
import { type MaterialReader, parseKeyRecord, parsePolicyRecord, runtimeVersionProblem } from '../core/records.js';
import { mapSliced, runInSlices } from '../core/time-slices.js';
import { type CacheChange, type CacheManager, HeldBackError } from '../store/cache-manager.js';
import type { Logger } from '../store/logger.js';
import type { RuntimeIdentity } from '../store/snapshot-store.js';
import { usageReport } from '../store/usage-report.js';
import { type HubClient, HubError } from './hub-client.js';
import type { CryptoMetrics, EngineStatus, HeartbeatResponse, RuntimeManifest } from './protocol.js';
import { compareWithManifest, type SyncCheckResult } from './sync-check.js';

export type { SyncCheckResult, SyncDifferences } from './sync-check.js';

export interface HeartbeatOutcome {
  readonly runtimeVersion: string;
  readonly runtimeChanged: boolean;
  /** Whether a snapshot from the hub was applied to the cache by this heartbeat. */
  readonly applied: boolean;
  readonly policyCount: number;
  readonly keyCount: number;
}


export interface RegistrationRules {
  /** The only hubUrl registration accepts (SVC_HUB_URL), normalized like a registration's. */
  readonly pinnedHubUrl?: string;
  /** The token the first registration must present in X-SVC-Registration-Token; never logged. */
  readonly token?: string;
}

/** A hub snapshot the engine did not apply because it would retire all or most of the runtime. */
export interface HeldBackSnapshot {
  readonly runtimeVersion: string;
  readonly reason: string;
  readonly policyCount: number;
  readonly keyCount: number;
  readonly retiredPolicies: number;
  readonly retiredKeys: number;
  readonly heldAt: string;
}

export interface RuntimeAgentDeps {
  readonly manager: CacheManager;
  readonly registration?: RegistrationRules;
  readonly client: HubClient;
  readonly readMaterial: MaterialReader;
  readonly engineVersion: string;
  readonly log: Logger;
  readonly identity: RuntimeIdentity | null;
}

const TENANT_PATTERN = /^[\x21-\x7e]{1,256}$/;

/** Constant-time comparison of secrets (tenant ids, registration tokens): hashing first makes the lengths equal. */
export function sameTenant(presented: string | undefined, expected: string): boolean {
  if (presented === undefined) return false;
  const a = createHash('sha256').update(presented).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** Validates and normalizes a registration body; 400 with a clear message otherwise. */
export function parseIdentity(body: unknown): RuntimeIdentity {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const { hubUrl, tenantId } = fields;
  const url = parseHttpUrl(hubUrl, 'hubUrl');
  if (url.username || url.password) throw errors.operationInvalid('hubUrl must not carry credentials');
  if (url.search || url.hash) throw errors.operationInvalid('hubUrl must not carry a query or fragment');
  if (typeof tenantId !== 'string' || !TENANT_PATTERN.test(tenantId)) {
    throw errors.operationInvalid(
      'tenantId must be a non-empty string of printable characters without spaces (at most 256)',
    );
  }
  return { hubUrl: url.toString().replace(/\/+$/, ''), tenantId };
}

export class RuntimeAgent {
  #identity: RuntimeIdentity | null;
  #online = false;
  #lastHeartbeatError: string | null = null;
  #lastApplyError: string | null = null;
  #chain: Promise<unknown> = Promise.resolve();
  readonly #registered = new Set<() => void>();
  #heldBack: { info: HeldBackSnapshot; change: CacheChange } | null = null;
  #heldBackTotal = 0;

  constructor(readonly deps: RuntimeAgentDeps) {
    this.#identity = deps.identity;
  }

  get identity(): RuntimeIdentity | null {
    return this.#identity;
  }

  /**
   * The identity the store held at start, for an agent built while the last snapshot was still loading
   * (serve.ts builds the operations API meanwhile); called before anything is served.
   */
  restoreIdentity(identity: RuntimeIdentity | null): void {
    this.#identity = identity;
  }

  get status(): EngineStatus {
    if (!this.#identity) return 'UNREGISTERED';
    return this.#online ? 'ONLINE' : 'OFFLINE';
  }

  get lastHeartbeatError(): string | null {
    return this.#lastHeartbeatError;
  }

  /** The hub snapshot waiting for an operator because it would retire all or most of the runtime. */
  get heldBack(): HeldBackSnapshot | null {
    return this.#heldBack?.info ?? null;
  }

  /** How many hub snapshots were held back since start (a metric). */
  get heldBackTotal(): number {
    return this.#heldBackTotal;
  }

  /** Applies the held-back snapshot: the operator's explicit act (POST /runtime/held-back/apply). */
  applyHeldBack(runtimeVersion: string | undefined): Promise<HeldBackSnapshot> {
    return this.#serial(async () => {
      const held = this.#heldBack;
      if (!held) throw errors.operationNotFound('no hub snapshot is held back');
      if (runtimeVersion !== undefined && runtimeVersion !== held.info.runtimeVersion) {
        throw errors.keyStateConflict(
          `the held-back snapshot is runtime version "${held.info.runtimeVersion}", not "${runtimeVersion}"`,
        );
      }
      await this.deps.manager.apply(held.change);
      this.#heldBack = null;
      this.deps.log.warn(
        { runtimeVersion: held.info.runtimeVersion, retiredKeys: held.info.retiredKeys, retiredPolicies: held.info.retiredPolicies },
        'held-back hub snapshot applied by an operator',
      );
      return held.info;
    });
  }

  /** Why the last snapshot from the hub could not be applied (store outage, invalid snapshot), if it failed. */
  get lastApplyError(): string | null {
    return this.#lastApplyError;
  }

  onRegistered(listener: () => void): void {
    this.#registered.add(listener);
  }

  /**
   * Registers the identity. The first registration needs no header; the same identity again is fine;
   * another hubUrl is 409; another tenantId needs the current tenant in `presentedTenant` (401 otherwise),
   * so a stranger cannot re-point a registered engine.
   */
  register(body: unknown, presentedTenant: string | undefined, presentedToken?: string): Promise<void> {
    const next = parseIdentity(body);
    const rules = this.deps.registration ?? {};
    return this.#serial(async () => {
      const current = this.#identity;
      // The first registration needs no tenant header (the contract); a configured token or a pinned hub
      // keeps a stranger on the operations network from taking an unregistered engine.
      if (!current && rules.token !== undefined && !sameTenant(presentedToken, rules.token)) {
        this.deps.log.warn({}, 'runtime identity registration refused: missing or wrong registration token');
        throw errors.unauthorized();
      }
      if (rules.pinnedHubUrl !== undefined && next.hubUrl !== rules.pinnedHubUrl) {
        this.deps.log.warn({ hubUrl: next.hubUrl }, 'runtime identity registration refused: not the pinned hub (SVC_HUB_URL)');
        throw errors.hubNotAllowed();
      }
      if (current && current.hubUrl !== next.hubUrl) throw errors.hubUrlChange();
      if (current && current.tenantId === next.tenantId) return;
      if (current && !sameTenant(presentedTenant, current.tenantId)) throw errors.unauthorized();
      const { manager } = this.deps;
      await manager.persist('identity not registered', () => manager.store.saveIdentity(next));
      if (current) {
        // Another tenant's runtime: forget the version so its hub sends its full snapshot next heartbeat.
        await manager.apply({ runtimeVersion: '' });
      }
      this.#identity = next;
      this.#online = false;
      this.deps.log.info(
        { hubUrl: next.hubUrl },
        current ? 'runtime identity changed tenant' : 'runtime identity registered',
      );
      for (const listener of this.#registered) listener();
    });
  }

  cryptoMetrics(): CryptoMetrics {
    const keys = usageReport(this.deps.manager.cache);
    return {
      keys,
      totalEncryptions: keys.reduce((sum, k) => sum + k.encryptions, 0),
      totalDecryptions: keys.reduce((sum, k) => sum + k.decryptions, 0),
      nearLimit: keys.some((k) => k.nearLimit),
    };
  }

  /** One heartbeat: report to the hub, apply its snapshot when the runtime changed. Throws 503 unregistered, 502 hub failure. */
  heartbeat(): Promise<HeartbeatOutcome> {
    return this.#serial(async () => {
      const identity = this.#identity;
      if (!identity) throw errors.identityNotConfigured();
      const { manager, client, log } = this.deps;
      const snapshot = manager.cache.current;
      let answer: HeartbeatResponse;
      try {
        answer = await client.heartbeat(identity, {
          tenantId: identity.tenantId,
          engineVersion: this.deps.engineVersion,
          runtimeVersion: snapshot.runtimeVersion,
          status: this.status,
          sentAt: new Date().toISOString(),
          cache: { policyCount: snapshot.policyCount, keyCount: snapshot.keyCount },
          cryptoMetrics: this.cryptoMetrics(),
        });
      } catch (error) {
        const detail = error instanceof HubError ? error.message : `hub heartbeat failed: ${(error as Error).message}`;
        if (this.#online || this.#lastHeartbeatError === null) {
          log.warn({ hubUrl: identity.hubUrl, err: detail }, 'hub unreachable: OFFLINE, serving from the local cache');
        }
        this.#online = false;
        this.#lastHeartbeatError = detail;
        throw errors.hubFailed(detail);
      }
      if (!this.#online) log.info({ hubUrl: identity.hubUrl }, 'hub connection established: ONLINE');
      this.#online = true;
      this.#lastHeartbeatError = null;
      manager.noteHeartbeat(new Date());
      const changed = answer.runtimeChanged && answer.runtimeVersion !== snapshot.runtimeVersion;
      const applied = changed ? await this.#apply(answer) : false;
      const current = manager.cache.current;
      return {
        runtimeVersion: current.runtimeVersion,
        runtimeChanged: answer.runtimeChanged,
        applied,
        policyCount: current.policyCount,
        keyCount: current.keyCount,
      };
    });
  }

  /** Applies a hub snapshot unless it is held back; returns whether it was applied. */
  async #apply(answer: HeartbeatResponse): Promise<boolean> {
    const { manager, readMaterial, log } = this.deps;
    const payload = answer.snapshot ?? { policies: [], keys: [] };
    try {
      let policies: ReturnType<typeof parsePolicyRecord>[];
      let keys: ReturnType<typeof parseKeyRecord>[];
      try {
        const problem = runtimeVersionProblem(answer.runtimeVersion);
        if (problem) throw errors.invalid(problem);
        // Sliced work: a snapshot of a large runtime does not hold the event loop while it is read.
        policies = await runInSlices(mapSliced(payload.policies, (p, i) => parsePolicyRecord(p, `snapshot.policies[${i}]`)));
        keys = await runInSlices(mapSliced(payload.keys, (k, i) => parseKeyRecord(k, `snapshot.keys[${i}]`, readMaterial)));
      } catch (error) {
        throw error instanceof EngineError ? errors.hubFailed(`hub sent an invalid snapshot: ${error.message}`) : error;
      }
      const change: CacheChange = {
        policies: { mode: 'replace', records: policies },
        keys: { mode: 'replace', records: keys },
        runtimeVersion: answer.runtimeVersion,
      };
      try {
        await manager.apply(change, { guard: true });
      } catch (error) {
        if (!(error instanceof HeldBackError)) throw error;
        const info: HeldBackSnapshot = {
          runtimeVersion: answer.runtimeVersion,
          reason: error.reason,
          policyCount: policies.length,
          keyCount: keys.length,
          retiredPolicies: error.merged.retiredPolicies,
          retiredKeys: error.merged.retiredKeys,
          heldAt: new Date().toISOString(),
        };
        if (this.#heldBack?.info.runtimeVersion !== info.runtimeVersion) {
          this.#heldBackTotal++;
          log.warn(
            { ...info, hubUrl: this.#identity?.hubUrl },
            'hub snapshot HELD BACK: it would retire all or most of the runtime; an operator may apply it (POST /engine/api/v1/runtime/held-back/apply)',
          );
        }
        this.#heldBack = { info, change };
        this.#lastApplyError = `snapshot held back: ${error.reason}`;
        return false;
      }
      this.#heldBack = null;
      this.#lastApplyError = null;
      log.info(
        { runtimeVersion: answer.runtimeVersion, policyCount: policies.length, keyCount: keys.length },
        'applied the runtime snapshot from the hub',
      );
      return true;
    } catch (error) {
      this.#lastApplyError = (error as Error).message;
      log.warn(
        { err: this.#lastApplyError },
        'could not apply the runtime snapshot from the hub; keeping the current one',
      );
      throw error;
    }
  }

  /** Compares the local cache with the hub's manifest (no key material crosses: check values only). */
  async syncCheck(): Promise<SyncCheckResult> {
    const identity = this.#identity;
    if (!identity) throw errors.identityNotConfigured();
    let manifest: RuntimeManifest;
    try {
      manifest = await this.deps.client.manifest(identity);
    } catch (error) {
      throw errors.hubFailed(
        error instanceof HubError ? error.message : `hub manifest failed: ${(error as Error).message}`,
      );
    }
    return compareWithManifest(this.deps.manager.cache.current, manifest);
  }

  #serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(task, task);
    this.#chain = run.catch(() => undefined);
    return run;
  }
}
