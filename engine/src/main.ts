// Entry point. Start order: configuration → master key → snapshot store (migrations, last snapshot
// loaded into the runtime cache before anything is served) → bootstrap file or dev seed → app(s) →
// heartbeat loop. SIGTERM/SIGINT drain in-flight requests, stop the loop and close the store.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { ConfigError, type EngineConfig, loadConfig } from './config.js';
import { ExecutionService } from './core/execution-service.js';
import { RuntimeCache } from './core/runtime-cache.js';
import { buildApp, buildOperationsApp, type EngineApp } from './http/app.js';
import { createMetrics } from './http/metrics.js';
import type { OperationsDeps } from './http/routes/operations/index.js';
import { HeartbeatLoop } from './hub/heartbeat-loop.js';
import { HubClient } from './hub/hub-client.js';
import { RuntimeAgent } from './hub/runtime-agent.js';
import { CacheManager } from './store/cache-manager.js';
import { wrappedMaterialReader } from './store/key-material.js';
import { loadMasterKey } from './store/master-key.js';
import { openDb } from './store/open-store.js';
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
];

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
  const log = pino({ level: config.logLevel, redact: ['req.headers["x-svc-tenant-id"]'] });
  const { store: storeConfig, hub: hubConfig } = config;

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

  // Key material from the hub and from syncs arrives wrapped under the master key (raw only if allowed).
  const readMaterial = wrappedMaterialReader(masterKey.key, storeConfig.allowRawKeyMaterial);
  const agent = new RuntimeAgent({
    manager,
    client: new HubClient({ timeoutMs: hubConfig.timeoutMs }),
    readMaterial,
    engineVersion: version,
    log,
    identity: stored.identity,
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
  };
  const metrics = createMetrics({
    cache,
    status: () => agent.status,
    storeAvailable: () => manager.health.available,
    engineVersion: version,
  });
  const separate = config.operationsListener;
  const execution = new ExecutionService(cache, config.limits);
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
    const ops = await buildOperationsApp({ operations, metrics, limits: config.limits, logger: log });
    apps.push(ops);
    const opsAddress = await ops.app.listen({ host: separate.host, port: separate.port });
    log.info({ address: opsAddress }, 'operations API listening');
  }
  log.info({ address, version, status: agent.status }, 'engine listening');

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
    Promise.all(apps.map((a) => a.lifecycle.shutdown(config.shutdownGraceMs)))
      .then(() => loop.stop())
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
