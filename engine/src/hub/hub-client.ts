// The engine's HTTP client for the hub: heartbeat and manifest calls with a short timeout. Failures
// become HubError with a one-line detail (connection refused, timeout, status) that the operations
// API reports as 502; the hub's answer bodies are checked before anything uses them.
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

export class HubError extends Error {
  override readonly name = 'HubError';
}

export interface HubClientOptions {
  readonly timeoutMs: number;
  /** Injected in tests; the global fetch otherwise. */
  readonly fetch?: FetchLike;
}

function describeFailure(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) {
    return `no answer within ${timeoutMs} ms`;
  }
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message ?? String(error);
}

export class HubClient {
  readonly #fetch: FetchLike;

  constructor(readonly options: HubClientOptions) {
    this.#fetch = options.fetch ?? ((url, init) => fetch(url, init));
  }

  async heartbeat(identity: RuntimeIdentity, body: HeartbeatRequest): Promise<HeartbeatResponse> {
    return checkHeartbeatResponse(await this.#call('heartbeat', identity, HUB_PATHS.heartbeat, 'POST', body));
  }

  async manifest(identity: RuntimeIdentity): Promise<RuntimeManifest> {
    return checkManifest(await this.#call('manifest', identity, HUB_PATHS.manifest, 'GET'));
  }

  async #call(what: string, identity: RuntimeIdentity, path: string, method: string, body?: unknown): Promise<unknown> {
    const url = `${identity.hubUrl.replace(/\/+$/, '')}${path}`;
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
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (error) {
      throw new HubError(`hub ${what} failed: ${describeFailure(error, this.options.timeoutMs)}`);
    }
    const text = await response.text().catch(() => '');
    if (!response.ok) {
      throw new HubError(`hub ${what} failed: hub answered ${response.status}${text ? ` ${text.slice(0, 200)}` : ''}`);
    }
    try {
      return JSON.parse(text);
    } catch {
      throw new HubError(`hub ${what} failed: the answer is not JSON`);
    }
  }
}
