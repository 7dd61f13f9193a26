// The engine's HTTP client for the hub: heartbeat and manifest calls with a short timeout. Failures
// become HubError with a one-line detail (connection refused, timeout, status) that the operations
// API reports as 502; the hub's answer bodies are checked before anything uses them.
import { parseJsonSliced } from '../core/json-slices.js';
import { runInSlices } from '../core/time-slices.js';
import type { RuntimeIdentity } from '../store/snapshot-store.js';
import {
  checkHeartbeatResponse,
  checkManifest,
  type HeartbeatRequest,
  type HeartbeatResponse,
  HUB_PATHS,
  type RuntimeManifest,
  TENANT_HEADER,
} from './protocol.js';

export type FetchLike = (url: string, init: RequestInit) => Promise<Response>;

/**
 * Largest hub answer the engine reads, in bytes. A heartbeat snapshot carries what a full sync
 * would, so this matches the engine's default request body limit (SVC_BODY_LIMIT_BYTES, 32 MiB);
 * without a cap a hostile or broken hub could make the engine buffer any amount of memory.
 */
export const MAX_HUB_ANSWER_BYTES = 32 * 1024 * 1024;

/**
 * How a hub answer is read: as the operations API reads a sync (a heartbeat snapshot is one, and may be
 * as large), in slices of the event loop, with the nesting limit of those bodies (answers are four
 * levels deep) and without a cap on values.
 */
const ANSWER_JSON = { maxDepth: 32, maxValues: Number.POSITIVE_INFINITY };

export class HubError extends Error {
  override readonly name = 'HubError';
}

export interface HubClientOptions {
  readonly timeoutMs: number;
  /** Cap on a hub answer's body; MAX_HUB_ANSWER_BYTES when not given. */
  readonly maxAnswerBytes?: number;
  /** Injected in tests; the global fetch otherwise. */
  readonly fetch?: FetchLike;
}

function describeFailure(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return `no answer within ${timeoutMs} ms`;
  }
  if (error instanceof HubError) return error.message;
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message ?? String(error);
}

/** Drops an answer body the engine will not read, so the connection is released; errors do not matter. */
async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

/**
 * Reads the body as a stream and stops (cancelling it) as soon as it passes `limit` bytes, so an
 * oversized answer never sits in memory whole.
 */
async function readCapped(response: Response, limit: number): Promise<Buffer> {
  const tooLarge = () => new HubError(`hub answer exceeds ${limit} bytes`);
  const declared = Number(response.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) {
    await discard(response);
    throw tooLarge();
  }
  if (!response.body) return Buffer.alloc(0);
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, total);
}

export class HubClient {
  readonly #fetch: FetchLike;
  readonly #maxAnswerBytes: number;

  constructor(readonly options: HubClientOptions) {
    this.#fetch = options.fetch ?? ((url, init) => fetch(url, init));
    this.#maxAnswerBytes = options.maxAnswerBytes ?? MAX_HUB_ANSWER_BYTES;
  }

  async heartbeat(identity: RuntimeIdentity, body: HeartbeatRequest): Promise<HeartbeatResponse> {
    return checkHeartbeatResponse(await this.#call('heartbeat', identity, HUB_PATHS.heartbeat, 'POST', body));
  }

  async manifest(identity: RuntimeIdentity): Promise<RuntimeManifest> {
    return checkManifest(await this.#call('manifest', identity, HUB_PATHS.manifest, 'GET'));
  }

  /** Every hub call goes through here: one place for the timeout, the redirect rule and the size cap. */
  async #call(what: string, identity: RuntimeIdentity, path: string, method: string, body?: unknown): Promise<unknown> {
    const url = `${identity.hubUrl.replace(/\/+$/, '')}${path}`;
    const failed = (detail: string) => new HubError(`hub ${what} failed: ${detail}`);
    let response: Response;
    try {
      response = await this.#fetch(url, {
        method,
        headers: {
          [TENANT_HEADER]: identity.tenantId,
          accept: 'application/json',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        // The tenant header is the operations API's only credential: a redirect must not carry it
        // to another address, so redirects are never followed.
        redirect: 'manual',
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (error) {
      throw failed(describeFailure(error, this.options.timeoutMs));
    }
    if (response.type === 'opaqueredirect' || (response.status >= 300 && response.status < 400)) {
      await discard(response);
      throw failed('hub answered a redirect (3xx); not followed');
    }
    if (!response.ok) {
      // Only the status: the hub's error body may hold anything (internal details, secrets) and
      // this detail reaches 502 answers, runtime info and logs.
      await discard(response);
      throw failed(`hub answered ${response.status}`);
    }
    let bytes: Buffer;
    try {
      bytes = await readCapped(response, this.#maxAnswerBytes);
    } catch (error) {
      throw failed(describeFailure(error, this.options.timeoutMs));
    }
    try {
      return await runInSlices(parseJsonSliced(bytes, ANSWER_JSON, 'answer'));
    } catch {
      throw failed('the answer is not JSON');
    }
  }
}
