// The operations API's permission level: every path but identity registration needs the registered
// tenant in X-SVC-Tenant-Id. 503 before any identity exists, 401 with the plain text body
// `unauthorized` when the header is missing or wrong (compared in constant time).
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { errors } from '../../../core/errors.js';
import { TENANT_HEADER } from '../../../hub/protocol.js';
import { type RuntimeAgent, sameTenant } from '../../../hub/runtime-agent.js';
import { sendError } from '../../error-handler.js';

export function presentedTenant(request: FastifyRequest): string | undefined {
  const value = request.headers[TENANT_HEADER];
  return typeof value === 'string' ? value : undefined;
}

export function sendUnauthorized(reply: FastifyReply): FastifyReply {
  return reply.code(401).type('text/plain; charset=utf-8').send('unauthorized');
}

export function tenantGuard(agent: RuntimeAgent): onRequestHookHandler {
  return (request, reply, done) => {
    const identity = agent.identity;
    if (!identity) {
      sendError(reply, errors.identityNotConfigured());
      return;
    }
    if (!sameTenant(presentedTenant(request), identity.tenantId)) {
      sendUnauthorized(reply);
      return;
    }
    done();
  };
}
