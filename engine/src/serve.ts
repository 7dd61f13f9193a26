// Everything after the store has started (main.ts): the HTTP layer loads and the execution and
// operations apps are built while the last snapshot loads; then the bootstrap file or dev seed, the
// stored identity handed to the hub agent, the listeners and the heartbeat loop. SIGTERM/SIGINT drain
// in-flight requests, stop the loop and close the store.
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { openAuditTrail } from './audit/open-audit.js';
import type { EngineConfig, RegistrationConfig } from './config.js';
import { ExecutionService } from './core/execution-service.js';
import type { RuntimeCache } from './core/runtime-cache.js';
import { buildApp, buildOperationsApp, type EngineApp, SERVICE_NAME } from './http/app.js';
import { createMetrics } from './http/metrics.js';
import type { OperationsDeps } from './http/routes/operations/index.js';
import { HeartbeatLoop } from './hub/heartbeat-loop.js';
import { HubClient } from './hub/hub-client.js';
import { registerHubMetrics } from './hub/hub-metrics.js';
import { RuntimeAgent } from './hub/runtime-agent.js';
import type { CacheManager } from './store/cache-manager.js';
import { wrappedMaterialReader } from './store/key-material.js';
import type { MasterKey } from './store/master-key.js';
import { seed } from './store/seed.js';
import type { ShutdownSignals } from './shutdown-signals.js';
import type { SnapshotStorePort } from './store/store-protocol.js';
import { WorkerPool } from './workers/worker-pool.js';

const version = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;

const CAPABILITIES = [
  'AES-256-GCM',
  'AES-256-SIV',
  'deterministic',
  'json-single',
  'json-batch',
  'ndjson-stream',
  'binary-frame',
  'key-wrap-rfc5649',
  'rewrap',
  'equality-terms',
  'audit',
];

/** SVC_REGISTRATION_TOKEN, or the first line of SVC_REGISTRATION_TOKEN_FILE; never logged. */
async function readRegistrationToken(settings: RegistrationConfig): Promise<string | undefined> {
  if (settings.tokenFile === undefined) return settings.token;
  let text: string;
  try {
    text = await readFile(settings.tokenFile, 'utf8');
  } catch (error) {
    throw new Error(`SVC_REGISTRATION_TOKEN_FILE: cannot read ${settings.tokenFile} (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`);
  }
  const token = text.trim();
  if (token.length < 16) throw new Error('SVC_REGISTRATION_TOKEN_FILE must hold a token of at least 16 characters');
  return token;
}

export interface Started {
  readonly config: EngineConfig;
  readonly log: Logger;
  readonly masterKey: MasterKey;
  readonly store: SnapshotStorePort;
  readonly cache: RuntimeCache;
  readonly manager: CacheManager;
  /** The last snapshot being loaded (CacheManager.restore). */
  readonly restoring: ReturnType<CacheManager['restore']>;
  /** Where SIGTERM/SIGINT go once the engine can drain; a signal that came during start waits there. */
  readonly signals: ShutdownSignals;
}

export async function serve({ config, log, masterKey, store, cache, manager, restoring, signals }: Started): Promise<void> {
  const { store: storeConfig, hub: hubConfig } = config;
  // The wire endpoint's modules (pg-gateway) load only when it is on, while the rest is built.
  const pgwireModule = config.pgwire ? import('./pgwire/listener.js') : undefined;
  pgwireModule?.catch(() => undefined);
  const registrationToken = await readRegistrationToken(config.registration);
  // Every execution and operations call is recorded (docs/audit.md).
  const audit = openAuditTrail(config.audit, masterKey.key, log);
  const execution = new ExecutionService(cache, config.limits, audit);
  // Large batches run on crypto worker threads (docs/workers.md); SVC_WORKERS=1 keeps them on this one.
  const pool = config.workers > 1 ? new WorkerPool(config.workers, execution, cache, log) : undefined;
  const metrics = createMetrics({
    cache,
    status: () => agent.status,
    storeAvailable: () => manager.health.available,
    engineVersion: version,
    workers: pool,
  });
  // Key material from the hub and from syncs arrives wrapped under the master key (raw only if allowed).
  const readMaterial = wrappedMaterialReader(masterKey.key, storeConfig.allowRawKeyMaterial);
  // Built before the last snapshot has loaded; the identity the store holds is handed to it once it
  // has (restoreIdentity below), before anything listens.
  const agent = new RuntimeAgent({
    manager,
    client: new HubClient({ timeoutMs: hubConfig.timeoutMs }),
    readMaterial,
    engineVersion: version,
    log,
    identity: null,
    registration: { pinnedHubUrl: config.registration.hubUrl, token: registrationToken },
  });
  const operations: OperationsDeps = {
    agent,
    manager,
    readMaterial,
    engineVersion: version,
    providerFamily: 'software',
    capabilities: CAPABILITIES,
    statsTimeoutMs: hubConfig.statsTimeoutMs,
    statsAllowedTargets: hubConfig.statsAllowedTargets,
    keyDestroyGraceMs: config.keyDestroyGraceMs,
  };
  registerHubMetrics(metrics.registry, agent);
  const separate = config.operationsListener;
  // Warm start: both apps are built, their routes and schemas compiled (ready), while the last
  // snapshot loads in the store; neither is served before it has loaded.
  const mainApp = await buildApp({
    execution,
    batches: pool,
    limits: config.limits,
    version,
    logger: log,
    metrics,
    operations: separate ? undefined : operations,
    serveMetrics: !separate,
    healthComponents: {
      // Informational: the engine serves from memory whatever the hub and the store do.
      hub: () => ({ status: 'UP', details: { status: agent.status } }),
      store: () => ({ status: 'UP', details: { driver: store.driver, available: manager.health.available } }),
    },
  });
  await mainApp.app.ready();
  const opsApp = separate
    ? await buildOperationsApp({ operations, metrics, limits: config.limits, logger: log, audit })
    : undefined;
  await opsApp?.app.ready();
  const apps: EngineApp[] = opsApp ? [mainApp, opsApp] : [mainApp];
  const stored = await restoring;
  log.info(
    {
      store: store.driver,
      location: store.location,
      masterKey: masterKey.origin,
      runtimeVersion: cache.current.runtimeVersion,
      policies: cache.current.policyCount,
      keys: cache.current.keyCount,
    },
    'snapshot store opened and last snapshot loaded',
  );
  await seed(
    manager,
    { bootstrapFile: config.bootstrapFile, devMode: config.devMode, dataDir: config.dataDir, masterKey: masterKey.key },
    log,
  );
  if (!cache.current.configured) log.warn('no policies or keys loaded: execution answers 503 until the cache is fed');

  const pinned = config.registration.hubUrl;
  if (pinned !== undefined && stored.identity && stored.identity.hubUrl !== pinned) {
    // Registered with another hub before the pin was set (perhaps by a stranger): never talk to it.
    throw new Error(
      `the stored runtime identity names hub ${stored.identity.hubUrl}, not SVC_HUB_URL (${pinned}): reset the identity (docs/operations.md#post-runtimeidentity) and register again`,
    );
  }
  agent.restoreIdentity(stored.identity);
  if (!stored.identity && !config.registration.hubUrl && registrationToken === undefined) {
    log.warn(
      'unregistered and neither SVC_HUB_URL nor SVC_REGISTRATION_TOKEN is set: whoever reaches the operations listener first may register this engine',
    );
  }
  // The PostgreSQL wire endpoint (docs/pgwire.md): off unless SVC_PG_PORT is set or in dev mode;
  // up before the HTTP listener, so a health answer means every listener is.
  const pgwire = config.pgwire && pgwireModule
    ? await (await pgwireModule).startPgWire({
      execution,
      batches: pool,
      config: config.pgwire,
      limits: config.limits,
      version,
      service: SERVICE_NAME,
      log,
    })
    : undefined;
  const address = await mainApp.app.listen({ host: config.host, port: config.port });
  if (separate && opsApp) {
    const opsAddress = await opsApp.app.listen({ host: separate.host, port: separate.port });
    // At warn, the level test harnesses keep, so a harness can find a port-0 listener's address.
    log.warn({ operationsAddress: opsAddress }, 'operations API listening');
  } else {
    log.warn('operations API shares the execution listener (SVC_OPS_SHARED=true)');
  }
  log.info({ address, version, status: agent.status, workers: config.workers }, 'engine listening');
  // Started once listening, so the threads' start-up does not compete with the warm start; a batch
  // arriving before they are up waits in the pool's queue.
  pool?.start();
  if (pool && config.testHooks) process.on('SIGUSR2', () => pool.terminateOne());

  const loop = new HeartbeatLoop(
    agent,
    { intervalMs: hubConfig.heartbeatIntervalMs, backoffMaxMs: hubConfig.backoffMaxMs },
    log,
  );
  loop.start();
  manager.startStateFlush(storeConfig.flushIntervalMs);

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: draining in-flight requests');
    Promise.all([...apps.map((a) => a.lifecycle.shutdown(config.shutdownGraceMs)), pgwire?.close(config.shutdownGraceMs)])
      .then(() => pool?.close())
      .then(() => loop.stop())
      .then(() => audit.close())
      .then(() => manager.close())
      .then(
        () => {
          log.info('engine stopped');
          process.exit(0);
        },
        (error: unknown) => {
          log.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  signals.handle(stop);
}
