// POST /runtime/held-back/apply: applies the hub snapshot the engine held back because it would have
// retired all or most of the runtime (nothing is erased either way: removed records become RETIRED).
// Optional body {runtimeVersion} makes sure the operator applies the snapshot they inspected.
import type { FastifyPluginAsync } from 'fastify';
import { errors } from '../../../core/errors.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, HeldBackApplied } from './schemas.js';

export const runtimeHeldBackRoute: FastifyPluginAsync<OperationsDeps> = async (app, { agent }) => {
  app.post(
    '/runtime/held-back/apply',
    { schema: { response: { 200: HeldBackApplied, ...errorResponses } } },
    async (request) => {
      const body = (request.body ?? {}) as Record<string, unknown>;
      const expected = body.runtimeVersion;
      if (expected !== undefined && typeof expected !== 'string') {
        throw errors.operationInvalid('runtimeVersion must be a string');
      }
      const applied = await agent.applyHeldBack(expected);
      return { success: true, runtimeVersion: applied.runtimeVersion };
    },
  );
};
