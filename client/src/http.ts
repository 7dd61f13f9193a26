// One place for how a request is sent: the per-request timeout, the retries (503 and connection errors
// only, with exponential backoff and jitter) and turning an error answer into an EngineError.
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { pipeline, Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { EngineConnectionError, EngineError, type EngineErrorBody, EngineTimeoutError } from './errors.js';

export interface RetryOptions {
  /** Attempts after the first one; default 3. `0` turns retries off. */
  readonly retries?: number;
  /** Delay before the first retry, doubled for each further one; default 100 ms. */
  readonly baseDelayMs?: number;
  /** Longest delay between two attempts; default 2000 ms. */
  readonly maxDelayMs?: number;
}

export interface TransportOptions {
  /** Per attempt: how long to wait for the whole answer (headers and body); default 30 000 ms. */
  readonly timeoutMs?: number;
  readonly retry?: RetryOptions;
  /** Headers sent with every request. */
  readonly headers?: Readonly<Record<string, string>>;
  /** The fetch to use; default the global one (Node 20's undici). */
  readonly fetch?: typeof fetch;
}

export interface SendOptions {
  readonly method: 'GET' | 'POST';
  readonly headers?: Readonly<Record<string, string>>;
  /** A body that can be sent again on a retry. */
  readonly body?: string | Uint8Array;
  /** Cancels the call (and its retries) from outside. */
  readonly signal?: AbortSignal;
}

export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

const RETRY_DEFAULTS = { retries: 3, baseDelayMs: 100, maxDelayMs: 2000 };

export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  private readonly retry: Required<RetryOptions>;
  private readonly headers: Readonly<Record<string, string>>;
  private readonly fetchImpl: typeof fetch;

  constructor(baseUrl: string, options: TransportOptions = {}) {
    // A trailing slash would double up with the paths (`//api/encrypt` is a 404 at the engine).
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retry = { ...RETRY_DEFAULTS, ...options.retry };
    this.headers = options.headers ?? {};
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** The delay before retry number `attempt` (1-based): exponential, capped, with full jitter. */
  backoff(attempt: number): number {
    const ceiling = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
    return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
  }

  /**
   * Sends a request whose body is in memory, retrying on 503 and on connection errors. Resolves with a
   * 2xx answer (body read in full); throws EngineError, EngineConnectionError or EngineTimeoutError.
   */
  async send(path: string, options: SendOptions): Promise<Answer> {
    for (let attempt = 0; ; attempt += 1) {
      const timeout = AbortSignal.timeout(this.timeoutMs);
      const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
      let response: Response;
      let body: Uint8Array;
      try {
        response = await this.fetchImpl(this.baseUrl + path, {
          method: options.method,
          headers: { ...this.headers, ...options.headers },
          body: options.body,
          signal,
        });
        body = new Uint8Array(await response.arrayBuffer());
      } catch (error) {
        if (timeout.aborted) throw new EngineTimeoutError(this.timeoutMs, { cause: error });
        if (options.signal?.aborted) throw error;
        if (!isConnectionError(error)) throw error;
        if (attempt >= this.retry.retries) {
          throw new EngineConnectionError(`cannot reach the engine at ${this.baseUrl}: ${describe(error)}`, attempt + 1, {
            cause: error,
          });
        }
        await sleep(this.backoff(attempt + 1), undefined, { signal: options.signal });
        continue;
      }
      if (response.status >= 200 && response.status < 300) {
        return { status: response.status, headers: response.headers, body };
      }
      // 503: nothing loaded yet, draining for shutdown, audit trail unavailable — all of them pass.
      if (response.status === 503 && attempt < this.retry.retries) {
        await sleep(this.backoff(attempt + 1), undefined, { signal: options.signal });
        continue;
      }
      throw errorFrom(response.status, response.headers, body);
    }
  }

  /**
   * Opens a request whose body streams (not retried: the source cannot be read twice). The timeout
   * covers the wait for the response headers only; the stream itself may last as long as it moves.
   *
   * Sent with node:http(s), not fetch: Node 20's fetch keeps memory in proportion to a streamed request
   * body (a 256 MiB upload held about 320 MiB more resident memory), so a long stream would grow without
   * bound. node:http pipes the body with backpressure and holds no more than a socket buffer. The
   * `fetch` option therefore applies to every call but streams.
   */
  async open(path: string, headers: Readonly<Record<string, string>>, body: ReadableStream<Uint8Array>, outer?: AbortSignal): Promise<{ response: Response; abort: AbortController }> {
    const abort = new AbortController();
    const signal = outer ? AbortSignal.any([outer, abort.signal]) : abort.signal;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.abort();
    }, this.timeoutMs);
    const url = new URL(this.baseUrl + path);
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    try {
      const answer = await new Promise<IncomingMessage>((resolve, reject) => {
        const request = send(url, { method: 'POST', headers: { ...this.headers, ...headers }, signal });
        request.once('response', resolve);
        request.once('error', reject);
        // The source is pulled only as fast as the socket drains; an answer that ends the exchange
        // early (an error status, the engine closing) ends the upload, which cancels the source.
        pipeline(Readable.fromWeb(body as WebReadableStream<Uint8Array>), request, (error) => {
          if (error) reject(error);
        });
      });
      const status = answer.statusCode ?? 0;
      const responseHeaders = new Headers();
      for (const [name, value] of Object.entries(answer.headers)) {
        if (value !== undefined) responseHeaders.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
      if (status < 200 || status >= 300) {
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const chunk of answer as AsyncIterable<Buffer>) {
          if (size < 65_536) chunks.push(chunk);
          size += chunk.length;
        }
        throw errorFrom(status, responseHeaders, Buffer.concat(chunks).subarray(0, 65_536));
      }
      const stream = Readable.toWeb(answer) as unknown as ReadableStream<Uint8Array>;
      return { response: new Response(stream, { status, headers: responseHeaders }), abort };
    } catch (error) {
      abort.abort();
      if (timedOut) throw new EngineTimeoutError(this.timeoutMs, { cause: error });
      if (outer?.aborted || error instanceof EngineError || !isConnectionError(error)) throw error;
      throw new EngineConnectionError(`cannot reach the engine at ${this.baseUrl}: ${describe(error)}`, 1, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }
}

/** An EngineError from an error answer: the JSON body when it is one, the text otherwise. */
export function errorFrom(status: number, headers: Headers, body: Uint8Array): EngineError {
  const text = new TextDecoder().decode(body);
  let parsed: EngineErrorBody | string = text;
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value === 'object' && value !== null && typeof (value as { error?: unknown }).error === 'string') {
      parsed = value as EngineErrorBody;
    }
  } catch {
    // plain text (the operations API's `unauthorized`) stays text
  }
  return new EngineError(status, parsed, headers.get('x-request-id') ?? undefined);
}

/**
 * Node's fetch reports every network failure as `TypeError: fetch failed` with the socket error as
 * cause; node:http (streams) reports the socket error itself.
 */
function isConnectionError(error: unknown): boolean {
  // A TypeError without a cause is a programming error (a malformed URL or header): not retried.
  if (error instanceof TypeError) return error.message === 'fetch failed' || error.cause !== undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && /^(ECONNREFUSED|ECONNRESET|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT)$/.test(code);
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (cause && typeof cause.code === 'string') return cause.code;
  if (cause && typeof cause.message === 'string') return cause.message;
  return error instanceof Error ? error.message : String(error);
}
