// POST /api/encrypt/batch and /api/decrypt/batch, in JSON (`items`, or `requests` for compatibility)
// and in the binary frame. Each item is processed on its own; the request answers 200 once processed.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { errors } from '../../core/errors.js';
import type { ExecutionService, ItemOutcome } from '../../core/execution-service.js';
import {
  BINARY_FRAME_TYPE,
  decodeRequestFrame,
  encodeResponseFrame,
  type FrameResult,
} from '../codecs/binary-frame.js';
import { accepts, mediaType } from '../content-type.js';
import { BatchResponse, batchBody, DecryptBody, EncryptBody, errorResponses } from '../schemas.js';

export type BatchOperation = 'encrypt' | 'decrypt' | 'rewrap';
type Operation = BatchOperation;

const SUCCESS_MESSAGE: Record<Operation, string> = {
  encrypt: 'encrypt succeeded',
  decrypt: 'decrypt succeeded',
  rewrap: 'rewrap succeeded',
};

export function batchItems(body: unknown): unknown[] {
  const raw =
    typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
  const items = raw.items ?? raw.requests;
  if (!Array.isArray(items)) throw errors.decode('batch request requires an items array');
  return items;
}

function originalData(item: unknown): string | undefined {
  const data = (item as { data?: unknown } | null)?.data;
  return typeof data === 'string' ? data : undefined;
}

export function elapsedMs(start: bigint): number {
  return Number((process.hrtime.bigint() - start) / 1_000_000n);
}

export function jsonBatch(operation: Operation, items: unknown[], outcomes: ItemOutcome[], start: bigint) {
  const dataField = operation === 'decrypt' ? 'decryptedData' : 'encryptedData';
  let totalSuccess = 0;
  const results = outcomes.map((outcome, i) => {
    if (outcome.ok) {
      totalSuccess++;
      return {
        success: true,
        code: 1000,
        message: SUCCESS_MESSAGE[operation],
        originalData: originalData(items[i]),
        [dataField]: outcome.data,
        policyCode: outcome.policyCode,
      };
    }
    return {
      success: false,
      code: 2000,
      message: outcome.error.message,
      originalData: originalData(items[i]),
      policyCode: outcome.policyCode,
    };
  });
  const totalFailed = outcomes.length - totalSuccess;
  return {
    success: totalFailed === 0,
    transportMode: 'json',
    results,
    totalProcessed: outcomes.length,
    totalSuccess,
    totalFailed,
    totalProcessingTime: elapsedMs(start),
  };
}

export function frameBatch(
  execution: ExecutionService,
  operation: Operation,
  body: Buffer,
  start: bigint,
  request: FastifyRequest,
): Buffer {
  const frame = decodeRequestFrame(body, operation, execution.limits.maxBatchItems);
  let results: FrameResult[];
  if (frame.operation === 'decrypt') {
    const decrypted = execution.decryptBytesMany(frame.items);
    request.auditSummary?.addAll(
      decrypted.map((r) => ('plaintext' in r ? { ok: true, policyCode: r.policyCode } : r)),
      frame.items,
    );
    results = decrypted.map((r) => ('plaintext' in r ? { ok: true, policyCode: r.policyCode, data: r.plaintext } : r));
  } else {
    const outcomes =
      frame.operation === 'encrypt' ? execution.encryptBytesMany(frame.items) : execution.rewrapCiphertexts(frame.items);
    request.auditSummary?.addAll(outcomes, frame.operation === 'rewrap' ? frame.items : undefined);
    results = outcomes;
  }
  const totalSuccess = results.filter((r) => r.ok).length;
  return encodeResponseFrame(operation, results, {
    totalSuccess,
    totalFailed: results.length - totalSuccess,
    totalProcessingTime: elapsedMs(start),
  });
}

export const batchRoutes: FastifyPluginAsync<{ execution: ExecutionService }> = async (app, { execution }) => {
  const onRequest = accepts('application/json', BINARY_FRAME_TYPE);

  for (const operation of ['encrypt', 'decrypt'] as const) {
    const run = (request: FastifyRequest, reply: FastifyReply) => {
      const start = process.hrtime.bigint();
      reply.header('x-svc-transport-mode', 'json');
      if (mediaType(request) === BINARY_FRAME_TYPE) {
        const out = frameBatch(execution, operation, request.body as Buffer, start, request);
        return reply.header('x-svc-transport-mode', 'binary-frame').type(BINARY_FRAME_TYPE).send(out);
      }
      const items = batchItems(request.body);
      const outcomes = operation === 'encrypt' ? execution.encryptMany(items) : execution.decryptMany(items);
      request.auditSummary?.addAll(outcomes, items);
      return reply.send(jsonBatch(operation, items, outcomes, start));
    };
    app.post(
      `/api/${operation}/batch`,
      {
        onRequest,
        schema: {
          description: `JSON batch, or a binary frame with Content-Type ${BINARY_FRAME_TYPE} (docs/binary-frame.md)`,
          body: batchBody(operation === 'encrypt' ? EncryptBody : DecryptBody),
          response: { 200: BatchResponse, ...errorResponses },
        },
      },
      run,
    );
  }
};
