// Entry point: parse configuration, feed the runtime cache, build the app, listen, and shut down
// gracefully on SIGTERM/SIGINT (in-flight requests and streams drain, new ones get 503).
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
import { ConfigError, type EngineConfig, loadConfig } from './config.js';
import { generateDevBootstrap, parseBootstrap } from './core/bootstrap.js';
import { ExecutionService } from './core/execution-service.js';
import { RuntimeCache } from './core/runtime-cache.js';
import { buildApp } from './http/app.js';

const version = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;

function readJson(path: string): unknown {
  return JSON.parse(readFileSync(path, 'utf8'));
}

function loadInitialSnapshot(config: EngineConfig, cache: RuntimeCache, log: Logger): void {
  if (config.bootstrapFile) {
    const snapshot = cache.replace(parseBootstrap(readJson(config.bootstrapFile)));
    log.info({ policies: snapshot.policyCount, keys: snapshot.keyCount }, 'loaded bootstrap file');
    return;
  }
  if (config.devMode) {
    // Stopgap until the snapshot store lands: dev keys are kept in the data directory (mode 0600) so
    // ciphertexts made in dev mode survive a restart.
    mkdirSync(config.dataDir, { recursive: true });
    const file = join(config.dataDir, 'dev-bootstrap.json');
    if (!existsSync(file)) writeFileSync(file, JSON.stringify(generateDevBootstrap(), null, 2), { mode: 0o600 });
    chmodSync(file, 0o600);
    const snapshot = cache.replace(parseBootstrap(readJson(file)));
    log.warn(
      { policies: snapshot.policies.map((p) => `${p.policyCode} (${p.algorithm})`) },
      'DEV MODE: serving demo policies with generated keys; never use dev mode in production',
    );
  }
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
  const log = pino({ level: config.logLevel, redact: ['req.headers["x-svc-tenant-id"]'] });
  const cache = new RuntimeCache();
  loadInitialSnapshot(config, cache, log);
  if (!cache.current.configured) log.warn('no policies or keys loaded: execution answers 503 until the cache is fed');

  const execution = new ExecutionService(cache, config.limits);
  const { app, lifecycle } = await buildApp({ execution, limits: config.limits, version, logger: log });
  const address = await app.listen({ host: config.host, port: config.port });
  log.info({ address, version }, 'engine listening');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: draining in-flight requests');
    lifecycle.shutdown(config.shutdownGraceMs).then(
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
