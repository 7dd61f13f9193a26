// POST /runtime/heartbeat: one heartbeat to the hub now, applying its snapshot if the runtime changed.
// Hub failure is 502 {"success": false, "error": <detail>}; a snapshot the store cannot take is 503.
import type { FastifyPluginAsync } from 'fastify';
import type { OperationsDeps } from './deps.js';
import { errorResponses, HeartbeatResult } from './schemas.js';

export const runtimeHeartbeatRoute: FastifyPluginAsync<OperationsDeps> = async (app, { agent }) => {
  app.post('/runtime/heartbeat', { schema: { response: { 200: HeartbeatResult, ...errorResponses } } }, async () => ({
    success: true,
    ...(await agent.heartbeat()),
  }));
};
