// Test wiring for the hub side: a reference hub app reached through `inject` (no listener), an
// engine-side cache manager on in-memory PGlite whose store can be made to fail, and a runtime agent.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { RuntimeCache } from '../../src/core/runtime-cache.js';
import type { FetchLike } from '../../src/hub/hub-client.js';
import { HubClient } from '../../src/hub/hub-client.js';
import { type RegistrationRules, RuntimeAgent } from '../../src/hub/runtime-agent.js';
import { buildHubApp } from '../../src/reference-hub/hub-app.js';
import { HubState } from '../../src/reference-hub/hub-state.js';
import { CacheManager } from '../../src/store/cache-manager.js';
import { wrappedMaterialReader } from '../../src/store/key-material.js';
import { type Logger, silentLogger } from '../../src/store/logger.js';
import { type OpenedDb, openDb } from '../../src/store/open-store.js';
import { type RuntimeIdentity, SnapshotStore } from '../../src/store/snapshot-store.js';

export const HUB_URL = 'http://hub.test:9100';
export const TENANT = 'tenant-test-1';

let shared: Promise<OpenedDb> | undefined;

/** One in-memory PGlite per test file (starting one takes a second); worlds use distinct engine ids. */
export function sharedDb(): Promise<OpenedDb> {
  shared ??= openDb({}, silentLogger);
  return shared;
}

/** Call from afterAll in files that use hubWorld. */
export async function closeSharedDb(): Promise<void> {
  const db = shared;
  shared = undefined;
  if (db) await (await db).close();
}

/** A store whose writes can be switched to fail, as a vanished PostgreSQL would make them. */
export class FlakyStore extends SnapshotStore {
  failing = false;

  override async saveChanges(...args: Parameters<SnapshotStore['saveChanges']>): Promise<void> {
    if (this.failing) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
    return super.saveChanges(...args);
  }

  override async saveState(...args: Parameters<SnapshotStore['saveState']>): Promise<void> {
    if (this.failing) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
    return super.saveState(...args);
  }

  override async saveIdentity(...args: Parameters<SnapshotStore['saveIdentity']>): Promise<void> {
    if (this.failing) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
    return super.saveIdentity(...args);
  }
}

/** fetch() answered by a Fastify app's inject; `down` makes it fail like a refused connection. */
export function injectFetch(app: FastifyInstance, control: { down: boolean } = { down: false }): FetchLike {
  return async (url, init) => {
    if (control.down) throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } });
    const target = new URL(url);
    const response = await app.inject({
      method: (init.method ?? 'GET') as 'GET' | 'POST',
      url: target.pathname + target.search,
      headers: init.headers as Record<string, string>,
      payload: init.body as string | undefined,
    });
    return new Response(response.statusCode === 204 ? null : response.body, {
      status: response.statusCode,
      headers: { 'content-type': String(response.headers['content-type'] ?? 'application/json') },
    });
  };
}

export interface HubWorld {
  readonly masterKey: Buffer;
  readonly hubState: HubState;
  readonly hub: FastifyInstance;
  readonly hubControl: { down: boolean };
  readonly store: FlakyStore;
  readonly manager: CacheManager;
  readonly agent: RuntimeAgent;
  close(): Promise<void>;
}

/** A hub with one tenant holding a GCM policy and key, and an engine side registered with it (or not). */
export async function hubWorld(
  options: {
    registered?: boolean;
    log?: Logger;
    identity?: RuntimeIdentity;
    registration?: RegistrationRules;
    /** Another hub's answers (a stranger's, say) instead of the reference hub's. */
    fetch?: FetchLike;
  } = {},
): Promise<HubWorld> {
  const masterKey = randomBytes(32);
  const hubState = new HubState();
  hubState.putTenant(TENANT, masterKey.toString('base64'));
  hubState.addKey(TENANT, { alias: 'pii-gcm', algorithm: 'AES-256-GCM' });
  hubState.putPolicy(TENANT, {
    policyCode: 'PII_EMAIL',
    policyName: 'pii-email',
    algorithm: 'AES-256-GCM',
    keyAlias: 'pii-gcm',
  });
  const hub = buildHubApp({ state: hubState, publicUrl: HUB_URL });
  const hubControl = { down: false };
  const store = new FlakyStore(await sharedDb(), `engine-${randomBytes(6).toString('hex')}`, masterKey);
  const log = options.log ?? silentLogger;
  const manager = new CacheManager(new RuntimeCache(), store, log);
  const stored = await manager.restore();
  const identity =
    options.identity ?? (options.registered === false ? stored.identity : { hubUrl: HUB_URL, tenantId: TENANT });
  if (identity && !stored.identity) await store.saveIdentity(identity);
  const agent = new RuntimeAgent({
    manager,
    client: new HubClient({ timeoutMs: 2000, fetch: options.fetch ?? injectFetch(hub, hubControl) }),
    registration: options.registration,
    readMaterial: wrappedMaterialReader(masterKey, false),
    engineVersion: '0.0.0-test',
    log,
    identity,
  });
  return {
    masterKey,
    hubState,
    hub,
    hubControl,
    store,
    manager,
    agent,
    close: async () => {
      await hub.close();
    },
  };
}
