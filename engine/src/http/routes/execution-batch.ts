// POST /api/encrypt/batch and /api/decrypt/batch, in JSON (`items`, or `requests` for compatibility)
// and in the binary frame. Each item is processed on its own; the request answers 200 once processed.
import { Readable } from 'node:stream';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { errors } from '../../core/errors.js';
import { ExecutionService, type ItemOutcome, type RawBytesItem } from '../../core/execution-service.js';
import type { BatchMethod, FrameSlice, FrameSource, ItemsRunner, JsonSlice } from '../../workers/protocol.js';
import { BINARY_FRAME_TYPE, decodeRequestFrameInSteps, encodeResultItems, joinResponseFrame } from '../codecs/binary-frame.js';
import { type BatchOperation, frameResults, originalData, resultObject } from '../batch-results.js';
import { accepts, mediaType } from '../content-type.js';
import { BatchResponse, batchBody, DecryptBody, EncryptBody, errorResponses } from '../schemas.js';

export type { BatchOperation };
export { originalData };
type Operation = BatchOperation;

export function batchItems(body: unknown): unknown[] {
  const raw =
    typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
  const items = raw.items ?? raw.requests;
  if (!Array.isArray(items)) throw errors.decode('batch request requires an items array');
  return items;
}

export function elapsedMs(start: bigint): number {
  return Number((process.hrtime.bigint() - start) / 1_000_000n);
}

export function jsonBatch(operation: Operation, items: unknown[], outcomes: ItemOutcome[], start: bigint) {
  let totalSuccess = 0;
  const results = outcomes.map((outcome, i) => {
    if (outcome.ok) totalSuccess++;
    return resultObject(operation, outcome, items[i]);
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

/**
 * A large batch (JSON or binary frame) is processed in slices with a turn of the event loop between
 * them, and a large JSON answer is written in slices too, so one batch of the largest size does not
 * hold up every other request for the whole of its work. A batch of one slice takes the direct path.
 */
const SLICE_ITEMS = 256;
const SLICE_DATA_BYTES = 256 * 1024;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

export async function inSlices<T, R>(
  execution: ExecutionService,
  items: readonly T[],
  size: (item: T) => number,
  run: (service: ExecutionService, slice: T[]) => R[],
): Promise<R[]> {
  if (items.length <= SLICE_ITEMS) return run(execution, [...items]);
  execution.checkBatchSize(items.length);
  // Every slice uses the snapshot current when the batch started, whatever syncs land meanwhile.
  const pinned = new ExecutionService({ current: execution.snapshot() }, execution.limits);
  const out: R[] = [];
  let start = 0;
  while (start < items.length) {
    await nextTurn(); // the body was parsed in the turn that called the handler: work starts in the next
    let end = start;
    let bytes = 0;
    while (end < items.length && end - start < SLICE_ITEMS && bytes < SLICE_DATA_BYTES) {
      bytes += size(items[end] as T);
      end++;
    }
    for (const result of run(pinned, items.slice(start, end))) out.push(result);
    start = end;
  }
  return out;
}

/**
 * Who runs a batch's items through the execution service: the main thread in slices (inThread), or
 * the crypto worker pool (workers/worker-pool.ts). Either way one snapshot serves the whole batch.
 */
export interface BatchRunner extends ItemsRunner {
  /** A JSON batch whose results are written as JSON text where they are made; undefined: use run(). */
  runJson?(
    operation: BatchOperation,
    method: BatchMethod,
    items: readonly unknown[],
    size: (item: unknown) => number,
    audit: boolean,
  ): Promise<JsonSlice[] | undefined>;
  /**
   * A binary-frame batch whose result items are encoded where they are made; undefined: use run().
   * `source`: the frame the items were decoded from, so a slice can travel as its bytes.
   */
  runFrame?(
    operation: BatchOperation,
    method: BatchMethod,
    items: readonly unknown[],
    size: (item: unknown) => number,
    audit: boolean,
    source?: FrameSource,
  ): Promise<FrameSlice[] | undefined>;
}

/** The execution service method behind each binary-frame endpoint. */
const FRAME_METHODS = { encrypt: 'encryptBytesMany', decrypt: 'decryptBytesMany', rewrap: 'rewrapCiphertexts' } as const;

const itemSize = (item: unknown) => originalData(item)?.length ?? 0;
const COMMA = Buffer.from(',');

/** Runs a JSON batch and answers it; the audit summary gets every item's outcome either way. */
export async function answerJsonBatch(
  batches: BatchRunner,
  operation: Operation,
  method: BatchMethod,
  items: unknown[],
  start: bigint,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const summary = request.auditSummary;
  const slices = await batches.runJson?.(operation, method, items, itemSize, summary !== null);
  if (!slices) {
    const outcomes = (await batches.run(method, items, itemSize)) as ItemOutcome[];
    summary?.addAll(outcomes, items);
    return sendJsonBatch(reply, jsonBatch(operation, items, outcomes, start));
  }
  let totalSuccess = 0;
  for (const slice of slices) {
    totalSuccess += slice.succeeded;
    if (slice.audit) summary?.merge(slice.audit);
  }
  const totalFailed = items.length - totalSuccess;
  // The same document jsonBatch answers, field for field; every slice holds at least one result.
  const parts: Uint8Array[] = [Buffer.from(`{"success":${totalFailed === 0},"transportMode":"json","results":[`)];
  for (const slice of slices) {
    if (parts.length > 1) parts.push(COMMA);
    parts.push(slice.bytes);
  }
  parts.push(
    Buffer.from(
      `],"totalProcessed":${items.length},"totalSuccess":${totalSuccess},"totalFailed":${totalFailed},` +
        `"totalProcessingTime":${elapsedMs(start)}}`,
    ),
  );
  return reply.type('application/json; charset=utf-8').send(Buffer.concat(parts));
}

export function inThread(execution: ExecutionService): BatchRunner {
  return {
    run: (method, items, size) =>
      inSlices(execution, items, size, (service, slice) =>
        (service[method] as (items: readonly unknown[]) => unknown[]).call(service, slice),
      ),
  };
}

/**
 * The batch response as a stream of JSON text, a slice of results per chunk, in the contract's field
 * order. Each slice waits for a turn of the event loop: socket writes that complete at once would
 * otherwise chain the whole response through microtasks and starve timers and other requests.
 */
async function* batchJsonText(batch: ReturnType<typeof jsonBatch>): AsyncGenerator<string> {
  const { results, ...totals } = batch;
  yield `{"success":${batch.success},"transportMode":"json","results":[`;
  for (let i = 0; i < results.length; i += SLICE_ITEMS) {
    await nextTurn();
    const slice = results.slice(i, i + SLICE_ITEMS).map((r) => JSON.stringify(r));
    yield (i === 0 ? '' : ',') + slice.join(',');
  }
  const { totalProcessed, totalSuccess, totalFailed, totalProcessingTime } = totals;
  yield `],${JSON.stringify({ totalProcessed, totalSuccess, totalFailed, totalProcessingTime }).slice(1)}`;
}

export async function frameBatch(
  execution: ExecutionService,
  batches: BatchRunner,
  operation: Operation,
  body: Buffer,
  start: bigint,
  request: FastifyRequest,
): Promise<Buffer> {
  const frame = await decodeRequestFrameInSteps(body, operation, execution.limits.maxBatchItems, nextTurn);
  const method = FRAME_METHODS[frame.operation];
  const size = frame.operation === 'encrypt' ? (item: unknown) => (item as RawBytesItem).data.length : (item: unknown) => (item as string).length;
  const summary = request.auditSummary;
  const slices = await batches.runFrame?.(operation, method, frame.items, size, summary !== null, { body, offsets: frame.offsets });
  if (slices) {
    let totalSuccess = 0;
    for (const slice of slices) {
      totalSuccess += slice.succeeded;
      if (slice.audit) summary?.merge(slice.audit);
    }
    const totals = { totalSuccess, totalFailed: frame.items.length - totalSuccess, totalProcessingTime: elapsedMs(start) };
    return joinResponseFrame(operation, frame.items.length, slices.map((s) => s.bytes), totals);
  }
  const outcomes = (await batches.run(method, frame.items, size)) as ItemOutcome[];
  const results = frameResults(operation, outcomes, frame.items, summary);
  const totalSuccess = results.filter((r) => r.ok).length;
  // Encoded a slice at a time, as the workers do: the largest frame's answer in one piece held the loop 100 ms and more.
  const parts: Buffer[] = [];
  for (let i = 0; i < results.length; i += SLICE_ITEMS) {
    if (i > 0) await nextTurn();
    parts.push(encodeResultItems(results.slice(i, i + SLICE_ITEMS)));
  }
  return joinResponseFrame(operation, results.length, parts, {
    totalSuccess,
    totalFailed: results.length - totalSuccess,
    totalProcessingTime: elapsedMs(start),
  });
}

/** A JSON batch's answer: the body itself, or for a large batch the same text written in slices. */
export function sendJsonBatch(reply: FastifyReply, batch: ReturnType<typeof jsonBatch>) {
  if (batch.results.length <= SLICE_ITEMS) return reply.send(batch);
  return reply.type('application/json; charset=utf-8').send(Readable.from(batchJsonText(batch), { highWaterMark: 1 }));
}

export const batchRoutes: FastifyPluginAsync<{ execution: ExecutionService; batches: BatchRunner }> = async (
  app,
  { execution, batches },
) => {
  const onRequest = accepts('application/json', BINARY_FRAME_TYPE);

  for (const operation of ['encrypt', 'decrypt'] as const) {
    const run = async (request: FastifyRequest, reply: FastifyReply) => {
      const start = process.hrtime.bigint();
      reply.header('x-svc-transport-mode', 'json');
      if (mediaType(request) === BINARY_FRAME_TYPE) {
        const out = await frameBatch(execution, batches, operation, request.body as Buffer, start, request);
        return reply.header('x-svc-transport-mode', 'binary-frame').type(BINARY_FRAME_TYPE).send(out);
      }
      const method = operation === 'encrypt' ? 'encryptMany' : 'decryptMany';
      return answerJsonBatch(batches, operation, method, batchItems(request.body), start, request, reply);
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
