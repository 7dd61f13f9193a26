// Entry point. Start order: configuration → the embedded store's process forked → master key →
// snapshot store (migrations, last snapshot loaded into the runtime cache before anything is served) →
// bootstrap file or dev seed → app(s) → heartbeat loop (serve.ts). The embedded store's process is the
// longest part of a warm start (docs/operations.md, "Embedded store footprint"), so it is forked first,
// before this process loads anything but its configuration: it boots and loads PGlite while this one
// loads its logger, reads the master key (then sends the open, the first moment the store directory is
// touched) and loads the HTTP layer.
import { chmod, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ConfigError, type EngineConfig, loadConfig } from './config.js';
import { ShutdownSignals } from './shutdown-signals.js';
import { loadMasterKey } from './store/master-key.js';
import { forkStoreProcess, ProcessSnapshotStore } from './store/process-snapshot-store.js';
import type { SnapshotStorePort } from './store/store-protocol.js';

async function main(): Promise<void> {
  const signals = new ShutdownSignals();
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
  const { store: storeConfig } = config;
  // Everything the engine writes (the store's files, dev-mode material) is private to its user: files
  // 0600, directories 0700, whatever the inherited umask (the store's process inherits it too); an
  // existing data directory is tightened too.
  process.umask(0o077);
  await mkdir(config.dataDir, { recursive: true, mode: 0o700 });
  const notPrivate = await chmod(config.dataDir, 0o700).then(
    () => undefined,
    (error: NodeJS.ErrnoException) => error.code ?? 'failed',
  );
  // The embedded store runs in a process of its own, forked only while it works (docs/operations.md,
  // "Embedded store footprint"); PostgreSQL is reached in process through a small pool.
  const pgliteDir = join(config.dataDir, 'store');
  const preforked = storeConfig.databaseUrl ? undefined : forkStoreProcess(pgliteDir);
  const [{ pino }, { RuntimeCache }, { CacheManager }] = await Promise.all([
    import('pino'),
    import('./core/runtime-cache.js'),
    import('./store/cache-manager.js'),
  ]);
  const log = pino({
    level: config.logLevel,
    redact: ['req.headers["x-svc-tenant-id"]', 'req.headers["x-svc-registration-token"]'],
  });
  if (notPrivate !== undefined) {
    log.warn({ dataDir: config.dataDir, err: notPrivate }, 'could not make the data directory private (0700): check its owner');
  }
  const masterKey = await loadMasterKey(
    { value: storeConfig.masterKey, file: storeConfig.masterKeyFile, devMode: config.devMode, dataDir: config.dataDir },
    log,
  );
  const store: SnapshotStorePort = storeConfig.databaseUrl
    ? await openPostgresStore(storeConfig.databaseUrl, config, masterKey.key, log)
    : new ProcessSnapshotStore(
      { pgliteDir, engineId: storeConfig.engineId, masterKey: masterKey.key, logLevel: config.logLevel },
      storeConfig.idleCloseMs,
      preforked,
    );
  const cache = new RuntimeCache();
  const manager = new CacheManager(cache, store, log);
  // Warm start: the embedded store opens in its own process while this one loads the HTTP layer and
  // builds the execution listener; nothing listens before the last snapshot is loaded.
  const restoring = manager.restore();
  restoring.catch(() => undefined);
  const { serve } = await import('./serve.js');
  await serve({ config, log, masterKey, store, cache, manager, restoring, signals });
}

async function openPostgresStore(
  url: string,
  config: EngineConfig,
  masterKey: Uint8Array,
  log: Logger,
): Promise<SnapshotStorePort> {
  const [{ openDb }, { SnapshotStore }] = await Promise.all([
    import('./store/open-store.js'),
    import('./store/snapshot-store.js'),
  ]);
  const opened = await openDb({ databaseUrl: url, queryTimeoutMs: config.store.timeoutMs }, log);
  return new SnapshotStore(opened, config.store.engineId, masterKey);
}

main().catch((error: unknown) => {
  process.stderr.write(`engine failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
