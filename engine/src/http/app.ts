// Builds the engine's Fastify app from its dependencies; listening, signals and configuration belong
// to main.ts. Routes are thin adapters over the core's execution service.
import swagger from '@fastify/swagger';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Limits } from '../config.js';
import type { ExecutionService } from '../core/execution-service.js';
import { BINARY_FRAME_TYPE } from './codecs/binary-frame.js';
import { NDJSON_TYPE } from './codecs/ndjson.js';
import type { AuditTrail } from '../core/audit.js';
import { installAuditHooks } from './audit-hook.js';
import { clientErrorHandler, frameworkErrors, installErrorHandler } from './error-handler.js';
import { installLifecycle, type Lifecycle } from './lifecycle.js';
import { type EngineMetrics, metricsRoute, requestMetrics } from './metrics.js';
import { parseJsonBody } from './json-body.js';
import { installMethodGuard } from './method-guard.js';
import { executionRoutes } from './routes/execution.js';
import type { BatchRunner } from './routes/execution-batch.js';
import { installTransportGuards } from './transport-guards.js';
import type { HealthComponent } from './routes/health.js';
import { type OperationsDeps, operationsRoutes } from './routes/operations/index.js';

export const SERVICE_NAME = 'svc-engine';

export interface AppDeps {
  readonly execution: ExecutionService;
  /** Runs large batches on the crypto worker pool; absent: on the main thread (SVC_WORKERS=1, tests). */
  readonly batches?: BatchRunner;
  readonly limits: Limits;
  /** Version of the running engine build (reported by /api/health). */
  readonly version: string;
  /** A pino logger; without one the app logs nothing (tests). */
  readonly logger?: FastifyBaseLogger;
  /** Extra /actuator/health components. */
  readonly healthComponents?: Record<string, () => HealthComponent>;
  /** The operations API (/engine/api/v1); absent when it is served by its own listener or not at all. */
  readonly operations?: OperationsDeps;
  /** Request metrics are recorded when given; GET /metrics is served here unless serveMetrics is false. */
  readonly metrics?: EngineMetrics;
  readonly serveMetrics?: boolean;
}

export interface OperationsAppDeps {
  readonly operations: OperationsDeps;
  /** Records every operations call (docs/audit.md). */
  readonly audit?: AuditTrail;
  readonly metrics?: EngineMetrics;
  readonly limits: Limits;
  readonly logger?: FastifyBaseLogger;
}

export interface EngineApp {
  readonly app: FastifyInstance;
  readonly lifecycle: Lifecycle;
}

function createFastify(limits: Limits, logger: FastifyBaseLogger | undefined, metrics: EngineMetrics | undefined): FastifyInstance {
  const verbose = logger !== undefined && ['debug', 'trace'].includes(logger.level);
  const app = Fastify({
    ...(logger ? { loggerInstance: logger } : { logger: false }),
    // A child logger per request (for its reqId) costs about as much as the encryption; below debug the
    // request's log is the engine's logger itself.
    ...(verbose ? {} : { childLoggerFactory: (parent: FastifyBaseLogger) => parent }),
    // Two info lines per request would cost more than the encryption; access lines are logged at debug.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: limits.bodyLimitBytes,
    // Node's request timeout would also cut off streams, which may last long while they keep moving:
    // the body time limits are the engine's own (transport-guards.ts, execution-stream.ts).
    requestTimeout: 0,
    // Node enforces headersTimeout when it checks its connections: check often enough for the limit to hold.
    http: {
      connectionsCheckingInterval: Math.max(250, Math.min(30_000, Math.floor(limits.requestTimeoutMs / 4))),
      headersTimeout: Math.min(60_000, limits.requestTimeoutMs),
      // Answered in the error catalogue by transport-guards.ts instead of Node's empty 400.
      requireHostHeader: false,
    },
    clientErrorHandler,
    frameworkErrors,
    connectionTimeout: limits.idleTimeoutMs,
    return503OnClosing: false,
    ajv: { customOptions: { coerceTypes: false } },
  });
  // One JSON decoder for bodies and stream lines (json-body.ts): UTF-8 only, bounded depth and values.
  const json = { maxDepth: limits.maxJsonDepth, maxValues: limits.maxJsonValues, strictUtf8: true };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) =>
    parseJsonBody(body as Buffer, json, done),
  );
  installTransportGuards(app, limits, metrics);
  if (verbose) {
    app.addHook('onResponse', (request, reply, done) => {
      // The path only: a query may carry a token (statsTargetUrl=…?token=…) and is never logged.
      const path = request.url.split('?', 1)[0];
      request.log.debug({ method: request.method, path, statusCode: reply.statusCode, ms: reply.elapsedTime }, 'request completed');
      done();
    });
  }
  return app;
}

export async function buildApp(deps: AppDeps): Promise<EngineApp> {
  const { limits } = deps;
  const app = createFastify(limits, deps.logger, deps.metrics);
  installErrorHandler(app, limits.bodyLimitBytes);
  installMethodGuard(app);
  const lifecycle = installLifecycle(app);
  if (deps.execution.audit) installAuditHooks(app, deps.execution.audit);
  if (deps.metrics) await app.register(requestMetrics, { metrics: deps.metrics });

  // The stream routes read the request body themselves, line by line; no limit applies to its total.
  app.addContentTypeParser(NDJSON_TYPE, (_request, payload, done) => done(null, payload));
  app.addContentTypeParser(BINARY_FRAME_TYPE, { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  await app.register(swagger, {
    openapi: {
      info: { title: 'Encryption runtime service (engine)', version: deps.version },
      tags: [{ name: 'execution' }],
    },
  });

  const health = {
    execution: deps.execution,
    lifecycle,
    service: SERVICE_NAME,
    version: deps.version,
    components: deps.healthComponents,
  };
  const routes = { execution: deps.execution, batches: deps.batches, limits, health };
  await app.register(executionRoutes, routes);
  // Deployments behind the '/engine' context path reach the same API there.
  await app.register(executionRoutes, { ...routes, prefix: '/engine' });
  if (deps.operations) await app.register(operationsRoutes, deps.operations);
  if (deps.metrics && deps.serveMetrics !== false) await app.register(metricsRoute, { metrics: deps.metrics });

  for (const prefix of ['', '/engine']) app.get(`${prefix}/openapi.json`, { schema: { hide: true } }, () => app.swagger());
  return { app, lifecycle };
}

/**
 * The operations API (and /metrics) on a listener of its own, so deployments can keep it off the
 * application network (SVC_OPS_HOST / SVC_OPS_PORT).
 */
export async function buildOperationsApp(deps: OperationsAppDeps): Promise<EngineApp> {
  const app = createFastify(deps.limits, deps.logger, deps.metrics);
  installErrorHandler(app, deps.limits.bodyLimitBytes);
  installMethodGuard(app);
  const lifecycle = installLifecycle(app);
  if (deps.audit) installAuditHooks(app, deps.audit);
  if (deps.metrics) await app.register(requestMetrics, { metrics: deps.metrics });
  await app.register(operationsRoutes, deps.operations);
  if (deps.metrics) await app.register(metricsRoute, { metrics: deps.metrics });
  // Liveness of the operations listener itself, for probes that must not reach the execution API.
  app.get('/health', { schema: { hide: true } }, () => ({ status: 'UP' }));
  return { app, lifecycle };
}
