// The execution API: single calls, batches split into requests the engine accepts, NDJSON streams as
// async iterables with backpressure end to end, and binary frames for bytes.
import { ReadableStream } from 'node:stream/web';
import {
  decodeResponseFrame,
  encodeCiphertextFrame,
  encodeEncryptFrame,
  FRAME_CONTENT_TYPE,
  type FrameEncryptItem,
  type FrameOperation,
  frameItemSize,
  type FrameResponse,
} from './frame.js';
import { EngineError } from './errors.js';
import { Transport, type TransportOptions } from './http.js';
import type { BatchItemResult, BatchResponse, CiphertextRequest, EncryptRequest, SingleResponse, StreamResult } from './types.js';

export interface EngineClientOptions extends TransportOptions {
  /**
   * Most items in one batch request; default 10 000, the engine's default `SVC_BATCH_MAX_ITEMS`. Larger
   * batches are sent as several requests, one after the other. An engine with a lower limit answers a
   * JSON batch with `413 batch has N items; the limit is M`: the client then sends that chunk again in
   * pieces of M, and cuts later chunks (binary frames included) to M.
   */
  readonly maxBatchItems?: number;
  /**
   * Most bytes in one batch request body; default 16 MiB, half the engine's default
   * `SVC_BODY_LIMIT_BYTES`. A single item larger than this still goes alone in its own request.
   */
  readonly maxBatchBytes?: number;
}

export interface CallOptions {
  /** Cancels the call (and any retry or further chunk). */
  readonly signal?: AbortSignal;
}

const JSON_TYPE = { 'content-type': 'application/json' };
const NDJSON_TYPE = { 'content-type': 'application/x-ndjson' };
const utf8 = new TextEncoder();
const STREAM_CHUNK_BYTES = 65_536;
const WAITING = Symbol('waiting');

export class EngineClient {
  private readonly transport: Transport;
  readonly maxBatchItems: number;
  readonly maxBatchBytes: number;
  /** maxBatchItems, or the lower limit an engine answered with (JSON batches). */
  private itemLimit: number;

  /** `baseUrl`: the engine's execution listener, e.g. `http://127.0.0.1:8080` (or `…/engine`). */
  constructor(baseUrl: string, options: EngineClientOptions = {}) {
    this.transport = new Transport(baseUrl, options);
    this.maxBatchItems = positive('maxBatchItems', options.maxBatchItems ?? 10_000);
    this.maxBatchBytes = positive('maxBatchBytes', options.maxBatchBytes ?? 16 * 1024 * 1024);
    this.itemLimit = this.maxBatchItems;
  }

  encrypt(request: EncryptRequest, options?: CallOptions): Promise<SingleResponse> {
    return this.single('/api/encrypt', request, options);
  }

  /** Sends `data` only (an encrypt answer can be passed as it is: the engine refuses other fields here). */
  decrypt(request: CiphertextRequest, options?: CallOptions): Promise<SingleResponse> {
    return this.single('/api/decrypt', { data: request.data }, options);
  }

  /** Re-encrypts a ciphertext under the newest key version of its policy. */
  rewrap(request: CiphertextRequest, options?: CallOptions): Promise<SingleResponse> {
    return this.single('/api/rewrap', { data: request.data }, options);
  }

  /** Any number of items; sent in chunks under the batch limits, results in request order. */
  encryptBatch(items: readonly EncryptRequest[], options?: CallOptions): Promise<BatchResponse> {
    return this.batch('/api/encrypt/batch', items, options);
  }

  decryptBatch(items: readonly CiphertextRequest[], options?: CallOptions): Promise<BatchResponse> {
    return this.batch('/api/decrypt/batch', items.map((item) => ({ data: item.data })), options);
  }

  rewrapBatch(items: readonly CiphertextRequest[], options?: CallOptions): Promise<BatchResponse> {
    return this.batch('/api/rewrap/batch', items.map((item) => ({ data: item.data })), options);
  }

  /**
   * Encrypts a stream of any length: one result per item, in order, as soon as the engine answers it.
   * The source is read only as fast as the results are consumed (the engine stops reading when nobody
   * reads its answers), so memory stays flat. A bad item gives an error result and the stream goes on.
   * Not retried: a source cannot be read twice.
   */
  encryptStream(source: AsyncIterable<EncryptRequest> | Iterable<EncryptRequest>, options?: CallOptions): AsyncGenerator<StreamResult> {
    return this.stream('/api/encrypt/stream', source, options);
  }

  decryptStream(source: AsyncIterable<CiphertextRequest> | Iterable<CiphertextRequest>, options?: CallOptions): AsyncGenerator<StreamResult> {
    return this.stream('/api/decrypt/stream', source, options);
  }

  rewrapStream(source: AsyncIterable<CiphertextRequest> | Iterable<CiphertextRequest>, options?: CallOptions): AsyncGenerator<StreamResult> {
    return this.stream('/api/rewrap/stream', source, options);
  }

  /** Encrypts raw bytes (not necessarily UTF-8) through the binary frame; chunked like batches. */
  encryptBytes(items: readonly FrameEncryptItem[], options?: CallOptions): Promise<FrameResponse> {
    return this.frames('encrypt', items, (chunk) => encodeEncryptFrame(chunk), options);
  }

  /** Decrypts to raw bytes through the binary frame (plaintexts that are not UTF-8 come back as they were). */
  decryptBytes(ciphertexts: readonly string[], options?: CallOptions): Promise<FrameResponse> {
    return this.frames('decrypt', ciphertexts, (chunk) => encodeCiphertextFrame('decrypt', chunk), options);
  }

  private async single(path: string, request: object, options?: CallOptions): Promise<SingleResponse> {
    const answer = await this.transport.send(path, { method: 'POST', headers: JSON_TYPE, body: JSON.stringify(request), signal: options?.signal });
    return parseJson(answer.body) as SingleResponse;
  }

  private async batch(path: string, items: readonly object[], options?: CallOptions): Promise<BatchResponse> {
    const results: BatchItemResult[] = [];
    let totalSuccess = 0;
    let totalFailed = 0;
    let totalProcessingTime = 0;
    // Each item is serialized once, measured, and joined into the body of the chunk it falls into.
    let chunk: string[] = [];
    let chunkBytes = 0;
    const send = async (parts: string[]): Promise<void> => {
      const body = `{"items":[${parts.join(',')}]}`;
      let answer;
      try {
        answer = await this.transport.send(path, { method: 'POST', headers: JSON_TYPE, body, signal: options?.signal });
      } catch (error) {
        // An engine configured below the client's limit says its limit (`batch has N items; the limit
        // is M`): the chunk is sent again in pieces it accepts, and later chunks are cut to it.
        const limit = batchLimitOf(error);
        if (limit === undefined || limit >= parts.length) throw error;
        this.itemLimit = limit;
        for (let start = 0; start < parts.length; start += limit) await send(parts.slice(start, start + limit));
        return;
      }
      const response = parseJson(answer.body) as BatchResponse;
      for (const result of response.results) results.push(result);
      totalSuccess += response.totalSuccess;
      totalFailed += response.totalFailed;
      totalProcessingTime += response.totalProcessingTime;
    };
    const flush = async () => {
      if (chunk.length === 0) return;
      const parts = chunk;
      chunk = [];
      chunkBytes = 0;
      await send(parts);
    };
    for (const item of items) {
      const json = JSON.stringify(item);
      const size = Buffer.byteLength(json) + 1;
      if (chunk.length >= this.itemLimit || (chunk.length > 0 && chunkBytes + size + 12 > this.maxBatchBytes)) await flush();
      chunk.push(json);
      chunkBytes += size;
    }
    await flush();
    return {
      success: totalFailed === 0,
      transportMode: 'json',
      results,
      totalProcessed: results.length,
      totalSuccess,
      totalFailed,
      totalProcessingTime,
    };
  }

  private async frames<T extends FrameEncryptItem | string>(
    operation: FrameOperation,
    items: readonly T[],
    encode: (chunk: T[]) => Uint8Array,
    options?: CallOptions,
  ): Promise<FrameResponse> {
    const merged: FrameResponse = { totalSuccess: 0, totalFailed: 0, totalProcessingTime: 0, results: [] };
    let chunk: T[] = [];
    let chunkBytes = 12;
    const flush = async () => {
      if (chunk.length === 0) return;
      const body = encode(chunk);
      chunk = [];
      chunkBytes = 12;
      const answer = await this.transport.send(`/api/${operation}/batch`, {
        method: 'POST',
        headers: { 'content-type': FRAME_CONTENT_TYPE },
        body,
        signal: options?.signal,
      });
      const response = decodeResponseFrame(operation, answer.body);
      for (const result of response.results) merged.results.push(result);
      Object.assign(merged, {
        totalSuccess: merged.totalSuccess + response.totalSuccess,
        totalFailed: merged.totalFailed + response.totalFailed,
        totalProcessingTime: merged.totalProcessingTime + response.totalProcessingTime,
      });
    };
    for (const item of items) {
      const size = frameItemSize(item);
      if (chunk.length >= this.itemLimit || (chunk.length > 0 && chunkBytes + size > this.maxBatchBytes)) await flush();
      chunk.push(item);
      chunkBytes += size;
    }
    await flush();
    return merged;
  }

  private async *stream(path: string, source: AsyncIterable<object> | Iterable<object>, options?: CallOptions): AsyncGenerator<StreamResult> {
    const iterator = Symbol.asyncIterator in source ? source[Symbol.asyncIterator]() : source[Symbol.iterator]();
    let sourceError: { error: unknown } | undefined;
    // The body is pulled only when the socket takes more, so a consumer that stops reading results (the
    // engine then stops reading lines) also stops the source. One pull gathers the lines the source has
    // ready, up to STREAM_CHUNK_BYTES, and sends them as one write (one write per line cost about 40 % of
    // the throughput); the chunk goes as soon as the source has nothing ready within the current turn of
    // the event loop, so a source that waits for the previous result before it yields never deadlocks
    // behind a half-full chunk.
    let next: Promise<IteratorResult<object>> | undefined;
    const body = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          try {
            const ticked = new Promise<typeof WAITING>((resolve) => setImmediate(resolve, WAITING));
            let lines = '';
            for (;;) {
              next ??= Promise.resolve(iterator.next());
              // Of two settled promises race takes the first listed: a ready item wins over the tick.
              const item = lines === '' ? await next : await Promise.race([next, ticked]);
              if (item === WAITING) break;
              next = undefined;
              if (item.done) {
                if (lines !== '') controller.enqueue(utf8.encode(lines));
                controller.close();
                return;
              }
              lines += `${JSON.stringify(item.value)}\n`;
              if (lines.length >= STREAM_CHUNK_BYTES) break;
            }
            controller.enqueue(utf8.encode(lines));
          } catch (error) {
            sourceError = { error };
            controller.error(error);
          }
        },
        async cancel() {
          await iterator.return?.();
        },
      },
      { highWaterMark: 1 },
    );
    const { response, abort } = await this.transport.open(path, NDJSON_TYPE, body as globalThis.ReadableStream<Uint8Array>, options?.signal);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for (;;) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          if (sourceError) throw sourceError.error;
          throw error;
        }
        if (chunk.done) break;
        pending += decoder.decode(chunk.value, { stream: true });
        let newline = pending.indexOf('\n');
        while (newline >= 0) {
          const line = pending.slice(0, newline);
          pending = pending.slice(newline + 1);
          if (line.trim() !== '') yield JSON.parse(line) as StreamResult;
          newline = pending.indexOf('\n');
        }
      }
      pending += decoder.decode();
      if (pending.trim() !== '') yield JSON.parse(pending) as StreamResult;
      if (sourceError) throw sourceError.error;
    } finally {
      // Early exit (break, throw, abort) or the end: release the connection and the source.
      abort.abort();
      await reader.cancel().catch(() => undefined);
    }
  }
}

/** The limit in the engine's `413 batch has N items; the limit is M`, when that is the error. */
function batchLimitOf(error: unknown): number | undefined {
  if (!(error instanceof EngineError) || error.status !== 413) return undefined;
  const match = /^batch has \d+ items; the limit is (\d+)$/.exec(error.engineMessage);
  const limit = match ? Number(match[1]) : NaN;
  return Number.isInteger(limit) && limit >= 1 ? limit : undefined;
}

function parseJson(body: Uint8Array): unknown {
  return JSON.parse(new TextDecoder().decode(body));
}

function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer`);
  return value;
}
