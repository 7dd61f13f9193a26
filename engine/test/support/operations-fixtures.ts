// An engine app with the operations API over a hub world (reference hub through inject, PGlite
// store), plus a log recorder, for app.inject tests of /engine/api/v1.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import type { AuditTrail } from '../../src/core/audit.js';
import { ExecutionService } from '../../src/core/execution-service.js';
import { buildApp, type EngineApp } from '../../src/http/app.js';
import { createMetrics, type EngineMetrics } from '../../src/http/metrics.js';
import type { OperationsDeps } from '../../src/http/routes/operations/index.js';
import type { FetchLike } from '../../src/hub/hub-client.js';
import type { RegistrationRules } from '../../src/hub/runtime-agent.js';
import { wrappedMaterialReader } from '../../src/store/key-material.js';
import { type HubWorld, hubWorld } from './hub-fixtures.js';
import { TEST_LIMITS, TEST_VERSION } from './http.js';

export const OPS = '/engine/api/v1';

export interface OperationsWorld extends HubWorld {
  readonly engine: EngineApp;
  readonly deps: OperationsDeps;
  readonly metrics: EngineMetrics;
  /** Every log line the engine wrote, at trace level. */
  readonly logs: string[];
}

export async function operationsWorld(
  options: {
    registered?: boolean;
    allowRawMaterial?: boolean;
    registration?: RegistrationRules;
    keyDestroyGraceMs?: number;
    fetch?: FetchLike;
    audit?: AuditTrail;
    stats?: Pick<OperationsDeps, 'statsAllowedTargets' | 'statsResolver'>;
  } = {},
): Promise<OperationsWorld> {
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const logger = pino({ level: 'trace' }, sink);
  const world = await hubWorld({
    registered: options.registered,
    log: logger,
    registration: options.registration,
    fetch: options.fetch,
  });
  const deps: OperationsDeps = {
    agent: world.agent,
    manager: world.manager,
    readMaterial: wrappedMaterialReader(world.masterKey, options.allowRawMaterial ?? false),
    engineVersion: TEST_VERSION,
    providerFamily: 'software',
    capabilities: ['AES-256-GCM', 'AES-256-SIV'],
    statsTimeoutMs: 2000,
    keyDestroyGraceMs: options.keyDestroyGraceMs ?? 168 * 3_600_000,
    ...options.stats,
  };
  const metrics = createMetrics({
    cache: world.manager.cache,
    status: () => world.agent.status,
    storeAvailable: () => world.manager.health.available,
    engineVersion: TEST_VERSION,
  });
  const engine = await buildApp({
    execution: new ExecutionService(world.manager.cache, TEST_LIMITS, options.audit),
    limits: TEST_LIMITS,
    version: TEST_VERSION,
    logger,
    operations: deps,
    metrics,
  });
  return {
    ...world,
    engine,
    deps,
    metrics,
    logs,
    close: async () => {
      await engine.app.close();
      await world.close();
    },
  };
}
