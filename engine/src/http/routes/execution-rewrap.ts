// POST /api/rewrap, /api/rewrap/batch (JSON or binary frame) and /api/rewrap/stream: ciphertext in,
// ciphertext under the newest ACTIVE key version of the same policy's key out (docs/rotation.md).
// The plaintext never leaves the engine. Same shapes, limits and result building as decrypt/encrypt.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Limits } from '../../config.js';
import type { ExecutionService } from '../../core/execution-service.js';
import { BINARY_FRAME_TYPE } from '../codecs/binary-frame.js';
import { accepts, mediaType } from '../content-type.js';
import { BatchResponse, batchBody, errorResponses, RewrapBody, SingleResponse } from '../schemas.js';
import { answerJsonBatch, type BatchRunner, batchItems, frameBatch } from './execution-batch.js';
import { ndjsonRoute } from './execution-stream.js';

export const rewrapRoutes: FastifyPluginAsync<{ execution: ExecutionService; batches: BatchRunner; limits: Limits }> = async (
  app,
  { execution, batches, limits },
) => {
  app.post(
    '/api/rewrap',
    {
      onRequest: accepts('application/json'),
      schema: { body: RewrapBody, response: { 200: SingleResponse, ...errorResponses } },
    },
    (request) => {
      const result = execution.rewrapOne(request.body);
      request.auditSummary?.add(result, request.body);
      return { success: true, data: result.data, policyCode: result.policyCode };
    },
  );

  app.post(
    '/api/rewrap/batch',
    {
      onRequest: accepts('application/json', BINARY_FRAME_TYPE),
      schema: {
        description: `JSON batch, or a binary frame (operation 03) with Content-Type ${BINARY_FRAME_TYPE}`,
        body: batchBody(RewrapBody),
        response: { 200: BatchResponse, ...errorResponses },
      },
    },
    async (request: FastifyRequest, reply: FastifyReply) => {
      const start = process.hrtime.bigint();
      if (mediaType(request) === BINARY_FRAME_TYPE) {
        const out = await frameBatch(execution, batches, 'rewrap', request.body as Buffer, start, request);
        return reply.header('x-svc-transport-mode', 'binary-frame').type(BINARY_FRAME_TYPE).send(out);
      }
      reply.header('x-svc-transport-mode', 'json');
      return answerJsonBatch(batches, 'rewrap', 'rewrapMany', batchItems(request.body), start, request, reply);
    },
  );

  ndjsonRoute(app, '/api/rewrap/stream', execution, execution.rewrapOne.bind(execution), limits);
};
