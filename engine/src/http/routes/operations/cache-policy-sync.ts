// POST /cache/policies/sync (upsert) and /cache/policies/sync-all (replace every policy). Any of the
// three payload shapes; one invalid entry rejects the whole payload and changes nothing.
import type { FastifyPluginAsync } from 'fastify';
import { runInSlices } from '../../../core/time-slices.js';
import { parsePolicySync } from '../../../hub/sync-payload.js';
import type { ChangeMode } from '../../../store/cache-manager.js';
import { accepts } from '../../content-type.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, SyncResult } from './schemas.js';

export const cachePolicySyncRoute: FastifyPluginAsync<OperationsDeps> = async (app, { manager }) => {
  const options = {
    onRequest: accepts('application/json'),
    schema: { response: { 200: SyncResult, ...errorResponses } },
  };
  const sync = (mode: ChangeMode) => async (request: { body: unknown }) => {
    const { records, runtimeVersion } = await runInSlices(parsePolicySync(request.body));
    await manager.apply({ policies: { mode, records }, runtimeVersion });
    return { success: true, count: records.length };
  };
  app.post('/cache/policies/sync', options, sync('upsert'));
  app.post('/cache/policies/sync-all', options, sync('replace'));
};
