// Builds the engine app over test keys for app.inject tests (and, when needed, a real listener).
import type { FastifyBaseLogger } from 'fastify';
import type { Limits } from '../../src/config.js';
import { ExecutionService } from '../../src/core/execution-service.js';
import type { KeyRecord, PolicyRecord } from '../../src/core/records.js';
import { RuntimeCache } from '../../src/core/runtime-cache.js';
import { buildApp, type EngineApp } from '../../src/http/app.js';
import type { EngineMetrics } from '../../src/http/metrics.js';
import { standardContent } from './fixtures.js';

export const TEST_VERSION = '9.9.9-test';

export const TEST_LIMITS: Limits = {
  bodyLimitBytes: 1024 * 1024,
  maxBatchItems: 100,
  maxDataBytes: 64 * 1024,
  maxStreamLineBytes: 128 * 1024,
  requestTimeoutMs: 60_000,
  idleTimeoutMs: 10_000,
  streamIdleTimeoutMs: 10_000,
  streamTimeoutMs: 60_000,
  maxConnections: 200,
  maxJsonDepth: 32,
  maxJsonValues: 2_000,
};

export interface TestApp extends EngineApp {
  readonly cache: RuntimeCache;
}

export async function testApp(
  options: {
    content?: { policies: readonly PolicyRecord[]; keys: readonly KeyRecord[] } | null;
    limits?: Partial<Limits>;
    logger?: FastifyBaseLogger;
    /** Served at GET /metrics when given. */
    metrics?: (cache: RuntimeCache) => EngineMetrics;
  } = {},
): Promise<TestApp> {
  const cache = new RuntimeCache();
  if (options.content !== null) cache.replace({ ...(options.content ?? standardContent()), runtimeVersion: 'test' });
  const limits = { ...TEST_LIMITS, ...options.limits };
  const built = await buildApp({
    execution: new ExecutionService(cache, limits),
    limits,
    version: TEST_VERSION,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.metrics ? { metrics: options.metrics(cache) } : {}),
  });
  return { ...built, cache };
}

export const JSON_HEADERS = { 'content-type': 'application/json' };
