// @svc/client: a typed client for the engine's execution API and operations API (Node 20.19+, fetch).
export { EngineClient, type CallOptions, type EngineClientOptions } from './client.js';
export { EngineConnectionError, EngineError, type EngineErrorBody, EngineTimeoutError } from './errors.js';
export {
  decodeResponseFrame,
  encodeCiphertextFrame,
  encodeEncryptFrame,
  FRAME_CONTENT_TYPE,
  type FrameEncryptItem,
  type FrameResponse,
  type FrameResult,
} from './frame.js';
export type { RetryOptions, TransportOptions } from './http.js';
export {
  type CacheStatus,
  type HeartbeatResult,
  OperationsClient,
  type OperationsClientOptions,
  type RuntimeIdentity,
  type RuntimeInfo,
  type SyncCheck,
  type SyncRecord,
  type SyncResult,
} from './operations.js';
export type { BatchItemResult, BatchResponse, CiphertextRequest, EncryptRequest, SingleResponse, StreamResult } from './types.js';
