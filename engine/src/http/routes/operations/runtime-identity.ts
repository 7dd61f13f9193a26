// POST /runtime/identity: registers {hubUrl, tenantId}. No header for the first registration; the
// same identity again is fine; another hubUrl is 409; another tenantId needs the current tenant header.
// With SVC_REGISTRATION_TOKEN the first registration must carry X-SVC-Registration-Token (401 otherwise);
// with SVC_HUB_URL any other hubUrl is 409 (docs/operations.md#registration).
import type { FastifyPluginAsync } from 'fastify';
import { EngineError } from '../../../core/errors.js';
import { REGISTRATION_TOKEN_HEADER } from '../../../hub/protocol.js';
import { accepts } from '../../content-type.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, SuccessBody } from './schemas.js';
import { presentedTenant, sendUnauthorized } from './tenant-guard.js';

export const runtimeIdentityRoute: FastifyPluginAsync<OperationsDeps> = async (app, { agent }) => {
  app.post(
    '/runtime/identity',
    { onRequest: accepts('application/json'), schema: { response: { 200: SuccessBody, ...errorResponses } } },
    async (request, reply) => {
      try {
        const token = request.headers[REGISTRATION_TOKEN_HEADER];
        await agent.register(request.body, presentedTenant(request), typeof token === 'string' ? token : undefined);
      } catch (error) {
        if (error instanceof EngineError && error.code === 'UNAUTHORIZED') return sendUnauthorized(reply);
        throw error;
      }
      return { success: true };
    },
  );
};
