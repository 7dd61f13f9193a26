// POST /api/equality-terms: a value and a deterministic policy in, the value's ciphertext under every
// key version that can still decrypt out (newest first), so `col = ANY(terms)` finds rows written
// before and after a rotation (docs/rotation.md).
import type { FastifyPluginAsync } from 'fastify';
import type { ExecutionService } from '../../core/execution-service.js';
import { parseEncryptRequest } from '../../core/request-validation.js';
import { accepts } from '../content-type.js';
import { EncryptBody, EqualityTermsResponse, errorResponses } from '../schemas.js';

export const equalityRoutes: FastifyPluginAsync<{ execution: ExecutionService }> = async (app, { execution }) => {
  app.post(
    '/api/equality-terms',
    {
      onRequest: accepts('application/json'),
      schema: { body: EncryptBody, response: { 200: EqualityTermsResponse, ...errorResponses } },
    },
    (request) => {
      // Same body rules as encrypt: one value and one policy reference.
      const { data, ref } = parseEncryptRequest(request.body);
      const result = execution.equalityTerms(ref, data);
      request.auditSummary?.add({ ok: true, policyCode: result.policyCode });
      for (const version of result.keyVersions) request.auditSummary?.keyVersions.add(version);
      return { success: true, terms: result.terms, policyCode: result.policyCode };
    },
  );
};
