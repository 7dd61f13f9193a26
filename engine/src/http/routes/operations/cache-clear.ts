// POST /cache/clear: empties the cache and its persisted snapshot. Execution answers 503 (not
// configured) until the next sync; pair it with a hub sync, as the contract says.
import type { FastifyPluginAsync } from 'fastify';
import type { OperationsDeps } from './deps.js';
import { errorResponses, SuccessBody } from './schemas.js';

export const cacheClearRoute: FastifyPluginAsync<OperationsDeps> = async (app, { manager, agent }) => {
  app.post('/cache/clear', { schema: { response: { 200: SuccessBody, ...errorResponses } } }, async (request) => {
    await manager.clear();
    request.log.warn({ hubUrl: agent.identity?.hubUrl }, 'runtime cache cleared: execution answers 503 until a sync');
    return { success: true };
  });
};
