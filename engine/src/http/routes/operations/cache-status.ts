// GET /cache/status: counts of the local cache only (policy records; key records by alias and version).
import type { FastifyPluginAsync } from 'fastify';
import type { OperationsDeps } from './deps.js';
import { CacheStatus } from './schemas.js';

export const cacheStatusRoute: FastifyPluginAsync<OperationsDeps> = async (app, { manager }) => {
  app.get('/cache/status', { schema: { response: { 200: CacheStatus } } }, async () => {
    const snapshot = manager.cache.current;
    return { policyCount: snapshot.policyCount, keyCount: snapshot.keyCount };
  });
};
