// The three ways a call fails, as classes a caller can tell apart with instanceof: the engine answered
// with an error status (EngineError, with the engine's own error body), the engine could not be
// reached (EngineConnectionError, after the retries), or it did not answer in time (EngineTimeoutError).

/** The error body the engine sends (`{"error": …}`, sometimes with `"success": false`). */
export interface EngineErrorBody {
  readonly success?: false;
  readonly error: string;
}

/** The engine answered with a non-2xx status. */
export class EngineError extends Error {
  override readonly name = 'EngineError';
  /** The HTTP status (400, 404, 409, 413, 415, 422, 503, …). */
  readonly status: number;
  /**
   * The engine's error body as it sent it: the JSON object (`{"error": "…"}`) when the body was JSON, or
   * the plain text (the operations API answers `401` with `unauthorized`).
   */
  readonly body: EngineErrorBody | string;
  /** The `X-Request-Id` of the engine's audit event for this call, when it sent one. */
  readonly requestId: string | undefined;

  constructor(status: number, body: EngineErrorBody | string, requestId?: string) {
    super(`engine answered ${status}: ${typeof body === 'string' ? body : body.error}`);
    this.status = status;
    this.body = body;
    this.requestId = requestId;
  }

  /** The engine's error message (`body.error`, or the plain text body). */
  get engineMessage(): string {
    return typeof this.body === 'string' ? this.body : this.body.error;
  }
}

/** The engine could not be reached (refused, reset, unresolvable name), after every retry. */
export class EngineConnectionError extends Error {
  override readonly name = 'EngineConnectionError';
  /** How many attempts were made. */
  readonly attempts: number;

  constructor(message: string, attempts: number, options?: { cause?: unknown }) {
    super(message, options);
    this.attempts = attempts;
  }
}

/** The engine did not answer within the request's timeout (never retried: the engine may have acted). */
export class EngineTimeoutError extends Error {
  override readonly name = 'EngineTimeoutError';
  readonly timeoutMs: number;

  constructor(timeoutMs: number, options?: { cause?: unknown }) {
    super(`the engine did not answer within ${timeoutMs} ms`, options);
    this.timeoutMs = timeoutMs;
  }
}
