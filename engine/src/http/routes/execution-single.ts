// POST /api/encrypt and /api/decrypt: one JSON body in, one JSON body out.
import type { FastifyPluginAsync } from 'fastify';
import type { ExecutionService } from '../../core/execution-service.js';
import { accepts } from '../content-type.js';
import { DecryptBody, EncryptBody, errorResponses, SingleResponse } from '../schemas.js';

export const singleRoutes: FastifyPluginAsync<{ execution: ExecutionService }> = async (app, { execution }) => {
  const json = accepts('application/json');
  const response = { 200: SingleResponse, ...errorResponses };

  app.post('/api/encrypt', { onRequest: json, schema: { body: EncryptBody, response } }, (request) => {
    const result = execution.encryptOne(request.body);
    request.auditSummary?.add(result, request.body);
    const { policyCode, data } = result;
    return { success: true, data, policyCode };
  });

  app.post('/api/decrypt', { onRequest: json, schema: { body: DecryptBody, response } }, (request) => {
    const result = execution.decryptOne(request.body);
    request.auditSummary?.add(result, request.body);
    const { policyCode, data } = result;
    return { success: true, data, policyCode };
  });
};
