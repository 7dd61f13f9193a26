// GET /cache/sync-check: compares the local cache with the hub's manifest (runtime version, policies,
// key versions with check values; never material). Hub failure is 502.
import type { FastifyPluginAsync } from 'fastify';
import type { OperationsDeps } from './deps.js';
import { errorResponses, SyncCheck } from './schemas.js';

export const cacheSyncCheckRoute: FastifyPluginAsync<OperationsDeps> = async (app, { agent }) => {
  app.get('/cache/sync-check', { schema: { response: { 200: SyncCheck, ...errorResponses } } }, () =>
    agent.syncCheck(),
  );
};
