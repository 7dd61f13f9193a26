// POST /cache/keys/sync (upsert by alias and version) and /cache/keys/sync-all (replace every key).
// Material must arrive wrapped under the master key (raw only when allowed); the response and any
// error name the entry, never the material.
import type { FastifyPluginAsync } from 'fastify';
import { runInSlices } from '../../../core/time-slices.js';
import { parseKeySync } from '../../../hub/sync-payload.js';
import type { ChangeMode } from '../../../store/cache-manager.js';
import { accepts } from '../../content-type.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, SyncResult } from './schemas.js';

export const cacheKeySyncRoute: FastifyPluginAsync<OperationsDeps> = async (app, { manager, readMaterial }) => {
  const options = {
    onRequest: accepts('application/json'),
    schema: { response: { 200: SyncResult, ...errorResponses } },
  };
  const sync = (mode: ChangeMode) => async (request: { body: unknown }) => {
    const { records, runtimeVersion } = await runInSlices(parseKeySync(request.body, readMaterial));
    await manager.apply({ keys: { mode, records }, runtimeVersion });
    return { success: true, count: records.length };
  };
  app.post('/cache/keys/sync', options, sync('upsert'));
  app.post('/cache/keys/sync-all', options, sync('replace'));
};
