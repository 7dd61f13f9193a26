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

/**
 * The route is open to whoever reaches the operations listener until the first registration, and its
 * body is two short strings: anything beyond 64 KiB is refused (413) from its Content-Length, before a
 * byte of it is read or parsed.
 */
export const IDENTITY_BODY_LIMIT_BYTES = 64 * 1024;

export const runtimeIdentityRoute: FastifyPluginAsync<OperationsDeps> = async (app, { agent }) => {
  app.post(
    '/runtime/identity',
    {
      onRequest: accepts('application/json'),
      bodyLimit: IDENTITY_BODY_LIMIT_BYTES,
      schema: { response: { 200: SuccessBody, ...errorResponses } },
    },
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
