// Entry point. Start order: configuration → master key → snapshot store (migrations, last snapshot
// loaded into the runtime cache before anything is served) → bootstrap file or dev seed → app(s) →
// heartbeat loop. SIGTERM/SIGINT drain in-flight requests, stop the loop and close the store.
import { readFileSync } from 'node:fs';
import { chmod, mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { openAuditTrail } from './audit/open-audit.js';
import { ConfigError, type EngineConfig, loadConfig, type RegistrationConfig } from './config.js';
import { ExecutionService } from './core/execution-service.js';
import { RuntimeCache } from './core/runtime-cache.js';
import { buildApp, buildOperationsApp, type EngineApp, SERVICE_NAME } from './http/app.js';
import { createMetrics } from './http/metrics.js';
import type { OperationsDeps } from './http/routes/operations/index.js';
import { HeartbeatLoop } from './hub/heartbeat-loop.js';
import { HubClient } from './hub/hub-client.js';
import { registerHubMetrics } from './hub/hub-metrics.js';
import { RuntimeAgent } from './hub/runtime-agent.js';
import { CacheManager } from './store/cache-manager.js';
import { wrappedMaterialReader } from './store/key-material.js';
import { loadMasterKey } from './store/master-key.js';
import { openDb } from './store/open-store.js';
import { startPgWire } from './pgwire/listener.js';
import { seed } from './store/seed.js';
import { SnapshotStore } from './store/snapshot-store.js';

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

async function main(): Promise<void> {
  let config: EngineConfig;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`configuration error: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const log = pino({
    level: config.logLevel,
    redact: ['req.headers["x-svc-tenant-id"]', 'req.headers["x-svc-registration-token"]'],
  });
  const { store: storeConfig, hub: hubConfig } = config;
  // Everything the engine writes (the store's files, dev-mode material) is private to its user: files
  // 0600, directories 0700, whatever the inherited umask; an existing data directory is tightened too.
  process.umask(0o077);
  await mkdir(config.dataDir, { recursive: true, mode: 0o700 });
  await chmod(config.dataDir, 0o700).catch((error: NodeJS.ErrnoException) =>
    log.warn({ dataDir: config.dataDir, err: error.code }, 'could not make the data directory private (0700): check its owner'),
  );
  const registrationToken = await readRegistrationToken(config.registration);

  const masterKey = await loadMasterKey(
    { value: storeConfig.masterKey, file: storeConfig.masterKeyFile, devMode: config.devMode, dataDir: config.dataDir },
    log,
  );
  const opened = await openDb(
    {
      databaseUrl: storeConfig.databaseUrl,
      pgliteDir: join(config.dataDir, 'store'),
      queryTimeoutMs: storeConfig.timeoutMs,
    },
    log,
  );
  const cache = new RuntimeCache();
  const manager = new CacheManager(cache, new SnapshotStore(opened, storeConfig.engineId, masterKey.key), log);
  const stored = await manager.restore();
  log.info(
    {
      store: opened.driver,
      location: opened.location,
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
  // Key material from the hub and from syncs arrives wrapped under the master key (raw only if allowed).
  const readMaterial = wrappedMaterialReader(masterKey.key, storeConfig.allowRawKeyMaterial);
  const agent = new RuntimeAgent({
    manager,
    client: new HubClient({ timeoutMs: hubConfig.timeoutMs }),
    readMaterial,
    engineVersion: version,
    log,
    identity: stored.identity,
    registration: { pinnedHubUrl: config.registration.hubUrl, token: registrationToken },
  });
  if (!stored.identity && !config.registration.hubUrl && registrationToken === undefined) {
    log.warn(
      'unregistered and neither SVC_HUB_URL nor SVC_REGISTRATION_TOKEN is set: whoever reaches the operations listener first may register this engine',
    );
  }
  const operations: OperationsDeps = {
    agent,
    manager,
    readMaterial,
    engineVersion: version,
    providerFamily: 'software',
    capabilities: CAPABILITIES,
    statsTimeoutMs: hubConfig.statsTimeoutMs,
    keyDestroyGraceMs: config.keyDestroyGraceMs,
  };
  const metrics = createMetrics({
    cache,
    status: () => agent.status,
    storeAvailable: () => manager.health.available,
    engineVersion: version,
  });
  registerHubMetrics(metrics.registry, agent);
  const separate = config.operationsListener;
  // Every execution and operations call is recorded (docs/audit.md).
  const audit = openAuditTrail(config.audit, masterKey.key, log);
  const execution = new ExecutionService(cache, config.limits, audit);
  const apps: EngineApp[] = [];
  const mainApp = await buildApp({
    execution,
    limits: config.limits,
    version,
    logger: log,
    metrics,
    operations: separate ? undefined : operations,
    serveMetrics: !separate,
    healthComponents: {
      // Informational: the engine serves from memory whatever the hub and the store do.
      hub: () => ({ status: 'UP', details: { status: agent.status } }),
      store: () => ({ status: 'UP', details: { driver: opened.driver, available: manager.health.available } }),
    },
  });
  apps.push(mainApp);
  const address = await mainApp.app.listen({ host: config.host, port: config.port });
  if (separate) {
    const ops = await buildOperationsApp({ operations, metrics, limits: config.limits, logger: log, audit });
    apps.push(ops);
    const opsAddress = await ops.app.listen({ host: separate.host, port: separate.port });
    // At warn, the level test harnesses keep, so a harness can find a port-0 listener's address.
    log.warn({ operationsAddress: opsAddress }, 'operations API listening');
  } else {
    log.warn('operations API shares the execution listener (SVC_OPS_SHARED=true)');
  }
  log.info({ address, version, status: agent.status }, 'engine listening');
  // The PostgreSQL wire endpoint (docs/pgwire.md): off unless SVC_PG_PORT is set or in dev mode.
  const pgwire = config.pgwire
    ? await startPgWire({ execution, config: config.pgwire, limits: config.limits, version, service: SERVICE_NAME, log })
    : undefined;

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
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((error: unknown) => {
  process.stderr.write(`engine failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
