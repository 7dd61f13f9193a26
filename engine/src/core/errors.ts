// The engine's error catalogue: every failure the core or a transport reports is one of these.
// Each entry fixes the HTTP status and the body shape the contract requires, so transports never
// invent their own messages and the error handler renders them in one place.

/** `plain` renders `{"error": m}`, `result` renders `{"success": false, "error": m}`. */
export type ErrorShape = 'plain' | 'result';

const CATALOGUE = {
  DECODE: { status: 400, shape: 'plain' },
  POLICY_REQUIRED: { status: 400, shape: 'result' },
  DECRYPT_DATA_ONLY: { status: 400, shape: 'result' },
  INVALID_REQUEST: { status: 400, shape: 'result' },
  MALFORMED_CIPHERTEXT: { status: 400, shape: 'result' },
  POLICY_NOT_FOUND: { status: 404, shape: 'result' },
  KEY_NOT_FOUND: { status: 404, shape: 'result' },
  POLICY_NOT_USABLE: { status: 409, shape: 'result' },
  DECRYPTION_FAILED: { status: 422, shape: 'result' },
  NOT_UTF8: { status: 422, shape: 'result' },
  PAYLOAD_TOO_LARGE: { status: 413, shape: 'plain' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, shape: 'plain' },
  NOT_FOUND: { status: 404, shape: 'plain' },
  METHOD_NOT_ALLOWED: { status: 405, shape: 'plain' },
  REQUEST_TIMEOUT: { status: 408, shape: 'plain' },
  HEADERS_TOO_LARGE: { status: 431, shape: 'plain' },
  EXPECTATION_FAILED: { status: 417, shape: 'plain' },
  NOT_CONFIGURED: { status: 503, shape: 'plain' },
  SHUTTING_DOWN: { status: 503, shape: 'plain' },
  INTERNAL: { status: 500, shape: 'plain' },
  // Operations API (spec section 7.2 and the decisions in docs/api.md).
  IDENTITY_NOT_CONFIGURED: { status: 503, shape: 'plain' },
  OPERATION_INVALID: { status: 400, shape: 'plain' },
  UNAUTHORIZED: { status: 401, shape: 'plain' },
  HUB_URL_CHANGE: { status: 409, shape: 'plain' },
  SYNC_EMPTY: { status: 400, shape: 'plain' },
  SYNC_INVALID: { status: 400, shape: 'plain' },
  HUB_FAILED: { status: 502, shape: 'result' },
  STORE_UNAVAILABLE: { status: 503, shape: 'result' },
  // Rotation and audit (docs/rotation.md, docs/audit.md).
  REWRAP_DATA_ONLY: { status: 400, shape: 'result' },
  NOT_DETERMINISTIC: { status: 400, shape: 'result' },
  TOO_MANY_KEY_VERSIONS: { status: 409, shape: 'result' },
  AUDIT_UNAVAILABLE: { status: 503, shape: 'result' },
  // Key states and registration hardening (docs/operations.md).
  KEY_BELOW_MIN_VERSION: { status: 409, shape: 'result' },
  HUB_NOT_ALLOWED: { status: 409, shape: 'plain' },
  KEY_STATE_CONFLICT: { status: 409, shape: 'plain' },
  OPERATION_NOT_FOUND: { status: 404, shape: 'plain' },
} as const satisfies Record<string, { status: number; shape: ErrorShape }>;

export type ErrorCode = keyof typeof CATALOGUE;

export class EngineError extends Error {
  readonly status: number;
  readonly shape: ErrorShape;

  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'EngineError';
    this.status = CATALOGUE[code].status;
    this.shape = CATALOGUE[code].shape;
  }

  /** The response body the contract prescribes for this error. */
  body(): { error: string } | { success: false; error: string } {
    return this.shape === 'plain' ? { error: this.message } : { success: false, error: this.message };
  }
}

export const errors = {
  decode: (detail: string) => new EngineError('DECODE', `decode request: ${detail}`),
  policyRequired: () => new EngineError('POLICY_REQUIRED', 'encrypt request requires policyCode or policyName'),
  decryptDataOnly: () => new EngineError('DECRYPT_DATA_ONLY', 'decrypt request accepts data only'),
  invalid: (detail: string) => new EngineError('INVALID_REQUEST', detail),
  malformedCiphertext: () => new EngineError('MALFORMED_CIPHERTEXT', 'malformed ciphertext'),
  policyNotFound: (ref: string) => new EngineError('POLICY_NOT_FOUND', `policy not found: ${ref}`),
  keyNotFound: (alias: string, version: number) =>
    new EngineError('KEY_NOT_FOUND', `key not found: ${alias} version ${version}`),
  policyNotUsable: (code: string, reason: string) => new EngineError('POLICY_NOT_USABLE', `policy ${code} ${reason}`),
  decryptionFailed: () => new EngineError('DECRYPTION_FAILED', 'decryption failed'),
  notUtf8: () => new EngineError('NOT_UTF8', 'decrypted data is not valid UTF-8; use the binary frame transport'),
  tooLarge: (detail: string) => new EngineError('PAYLOAD_TOO_LARGE', detail),
  tooManyItems: (count: number, limit: number) =>
    new EngineError('PAYLOAD_TOO_LARGE', `batch has ${count} items; the limit is ${limit}`),
  unsupportedMediaType: (type: string) =>
    new EngineError('UNSUPPORTED_MEDIA_TYPE', `unsupported content type: ${type || '(none)'}`),
  unsupportedCharset: (charset: string) =>
    new EngineError('UNSUPPORTED_MEDIA_TYPE', `unsupported charset: ${charset} (JSON and NDJSON bodies are UTF-8)`),
  expectationFailed: () => new EngineError('EXPECTATION_FAILED', 'unsupported Expect header (only 100-continue is)'),
  notFound: () => new EngineError('NOT_FOUND', 'not found'),
  methodNotAllowed: () => new EngineError('METHOD_NOT_ALLOWED', 'method not allowed'),
  requestTimeout: () => new EngineError('REQUEST_TIMEOUT', 'request timed out'),
  streamTimeout: (detail: string) => new EngineError('REQUEST_TIMEOUT', `request timed out: ${detail}`),
  headersTooLarge: () => new EngineError('HEADERS_TOO_LARGE', 'request headers too large'),
  malformedHttp: () => new EngineError('DECODE', 'decode request: malformed HTTP request'),
  notConfigured: () => new EngineError('NOT_CONFIGURED', 'crypto service is not configured'),
  shuttingDown: () => new EngineError('SHUTTING_DOWN', 'engine is shutting down'),
  internal: () => new EngineError('INTERNAL', 'internal error'),
  identityNotConfigured: () => new EngineError('IDENTITY_NOT_CONFIGURED', 'runtime identity is not configured'),
  operationInvalid: (detail: string) => new EngineError('OPERATION_INVALID', detail),
  /** Rendered as the plain text body `unauthorized` (spec section 5), not as JSON. */
  unauthorized: () => new EngineError('UNAUTHORIZED', 'unauthorized'),
  hubUrlChange: () =>
    new EngineError('HUB_URL_CHANGE', 'runtime identity hubUrl cannot be changed through registration'),
  syncEmpty: (kind: 'policy' | 'key') =>
    new EngineError(
      'SYNC_EMPTY',
      kind === 'policy' ? 'policy sync request has no policies' : 'key sync request has no keys',
    ),
  syncInvalid: (detail: string) => new EngineError('SYNC_INVALID', detail),
  hubFailed: (detail: string) => new EngineError('HUB_FAILED', detail),
  storeUnavailable: (detail: string) => new EngineError('STORE_UNAVAILABLE', `snapshot store unavailable: ${detail}`),
  rewrapDataOnly: () => new EngineError('REWRAP_DATA_ONLY', 'rewrap request accepts data only'),
  notDeterministic: (code: string) =>
    new EngineError('NOT_DETERMINISTIC', `equality terms need a deterministic policy: ${code}`),
  tooManyKeyVersions: (code: string, count: number, limit: number) =>
    new EngineError(
      'TOO_MANY_KEY_VERSIONS',
      `policy ${code} has ${count} key versions that can decrypt; equality terms cover at most ${limit}: rewrap old data and retire old versions`,
    ),
  auditUnavailable: () =>
    new EngineError('AUDIT_UNAVAILABLE', 'audit trail unavailable: requests are refused until it can be written'),
  keyBelowMinVersion: (alias: string, version: number, min: number) =>
    new EngineError(
      'KEY_BELOW_MIN_VERSION',
      `key ${alias} version ${version} is below the minimum decryption version ${min}`,
    ),
  hubNotAllowed: () =>
    new EngineError('HUB_NOT_ALLOWED', 'hubUrl is not the hub this engine is pinned to (SVC_HUB_URL)'),
  keyStateConflict: (detail: string) => new EngineError('KEY_STATE_CONFLICT', detail),
  operationNotFound: (detail: string) => new EngineError('OPERATION_NOT_FOUND', detail),
};
