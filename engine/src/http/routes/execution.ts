// The execution API under one prefix ('' or the '/engine' context path): health, single, batch, stream,
// rewrap and equality terms.
import type { FastifyPluginAsync } from 'fastify';
import type { Limits } from '../../config.js';
import type { ExecutionService } from '../../core/execution-service.js';
import { type BatchRunner, batchRoutes, inThread } from './execution-batch.js';
import { equalityRoutes } from './execution-equality.js';
import { rewrapRoutes } from './execution-rewrap.js';
import { singleRoutes } from './execution-single.js';
import { streamRoutes } from './execution-stream.js';
import { type HealthOptions, healthRoutes } from './health.js';

export interface ExecutionRoutesOptions {
  readonly execution: ExecutionService;
  /** Who runs batches: the crypto worker pool, or (absent) the main thread. */
  readonly batches?: BatchRunner;
  readonly limits: Limits;
  readonly health: HealthOptions;
}

export const executionRoutes: FastifyPluginAsync<ExecutionRoutesOptions> = async (app, opts) => {
  // Request bodies are checked by the core so every transport applies the same rules and messages;
  // the body schemas on these routes document the API and are not enforced a second time.
  app.setValidatorCompiler(() => () => true);
  await app.register(healthRoutes, opts.health);
  await app.register(singleRoutes, { execution: opts.execution });
  const batches = opts.batches ?? inThread(opts.execution);
  await app.register(batchRoutes, { execution: opts.execution, batches });
  await app.register(streamRoutes, { execution: opts.execution, limits: opts.limits });
  await app.register(rewrapRoutes, { execution: opts.execution, batches, limits: opts.limits });
  await app.register(equalityRoutes, { execution: opts.execution });
};
