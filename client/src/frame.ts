// The binary frame, version 1 (`application/x-svc-binary-frame`): raw bytes in batches, without JSON
// escaping or base64. Written from the published layout (docs/binary-frame.md) so the client carries
// no code of the engine's.

export const FRAME_CONTENT_TYPE = 'application/x-svc-binary-frame';

const MAGIC = [0x53, 0x56, 0x43, 0x46]; // "SVCF"
const VERSION = 1;
const RESULT_CODE_SUCCESS = 1000;

export type FrameOperation = 'encrypt' | 'decrypt' | 'rewrap';
const OPERATION_CODE: Record<FrameOperation, number> = { encrypt: 0x01, decrypt: 0x02, rewrap: 0x03 };

/** One encrypt item: bytes under a policy code, or a policy name (and optionally a version). */
export type FrameEncryptItem =
  | { readonly data: Uint8Array; readonly policyCode: string }
  | { readonly data: Uint8Array; readonly policyName: string; readonly policyVersion?: number };

/** One result of a frame, in request order. */
export type FrameResult =
  | { readonly success: true; readonly policyCode: string | undefined; readonly data: Uint8Array }
  | {
    readonly success: false;
    /** The HTTP status the same failure gets as a single request (400, 404, 409, 413, 422). */
    readonly status: number;
    readonly policyCode: string | undefined;
    readonly error: string;
  };

export interface FrameResponse {
  readonly totalSuccess: number;
  readonly totalFailed: number;
  readonly totalProcessingTime: number;
  readonly results: FrameResult[];
}

const utf8 = new TextEncoder();

/** The encoded size of one item, for chunking by bytes before anything is encoded. */
export function frameItemSize(item: FrameEncryptItem | string): number {
  if (typeof item === 'string') return 4 + utf8.encode(item).byteLength;
  const reference = 'policyCode' in item ? item.policyCode : item.policyName;
  return 1 + 4 + 2 + utf8.encode(reference).byteLength + 4 + item.data.byteLength;
}

export function encodeEncryptFrame(items: readonly FrameEncryptItem[]): Uint8Array {
  const parts = items.map((item) => {
    const byCode = 'policyCode' in item;
    const reference = utf8.encode(byCode ? item.policyCode : item.policyName);
    if (reference.byteLength > 0xffff) throw new RangeError('policy reference longer than 65535 bytes');
    const head = new Uint8Array(1 + 4 + 2 + reference.byteLength + 4);
    const view = new DataView(head.buffer);
    view.setUint8(0, byCode ? 0x01 : 0x02);
    view.setUint32(1, byCode ? 0 : (item.policyVersion ?? 0));
    view.setUint16(5, reference.byteLength);
    head.set(reference, 7);
    view.setUint32(7 + reference.byteLength, item.data.byteLength);
    return [head, item.data];
  });
  return assemble('encrypt', items.length, parts.flat());
}

/** Decrypt and rewrap frames: each item is a ciphertext (`hub:<code>:<rest>`, ASCII). */
export function encodeCiphertextFrame(operation: 'decrypt' | 'rewrap', ciphertexts: readonly string[]): Uint8Array {
  const parts = ciphertexts.flatMap((ciphertext) => {
    const data = utf8.encode(ciphertext);
    const length = new Uint8Array(4);
    new DataView(length.buffer).setUint32(0, data.byteLength);
    return [length, data];
  });
  return assemble(operation, ciphertexts.length, parts);
}

function assemble(operation: FrameOperation, count: number, parts: Uint8Array[]): Uint8Array {
  const size = 12 + parts.reduce((sum, part) => sum + part.byteLength, 0);
  const frame = new Uint8Array(size);
  frame.set(MAGIC, 0);
  const view = new DataView(frame.buffer);
  view.setUint8(4, VERSION);
  view.setUint8(5, OPERATION_CODE[operation]);
  view.setUint32(8, count);
  let offset = 12;
  for (const part of parts) {
    frame.set(part, offset);
    offset += part.byteLength;
  }
  return frame;
}

/** Decodes a response frame; throws on anything that is not a well-formed answer to `operation`. */
export function decodeResponseFrame(operation: FrameOperation, frame: Uint8Array): FrameResponse {
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const need = (offset: number, size: number) => {
    if (offset + size > frame.byteLength) throw new Error('binary frame response is truncated');
  };
  need(0, 24);
  if (MAGIC.some((byte, i) => frame[i] !== byte) || view.getUint8(4) !== VERSION) {
    throw new Error('binary frame response has an unknown magic or version');
  }
  if (view.getUint8(5) !== (OPERATION_CODE[operation] | 0x80)) {
    throw new Error('binary frame response is for another operation');
  }
  const count = view.getUint32(8);
  const results: FrameResult[] = [];
  const text = new TextDecoder();
  let offset = 24;
  for (let i = 0; i < count; i += 1) {
    need(offset, 6);
    const code = view.getUint16(offset);
    const status = view.getUint16(offset + 2);
    const policyLength = view.getUint16(offset + 4);
    offset += 6;
    need(offset, policyLength + 4);
    const policyCode = policyLength === 0 ? undefined : text.decode(frame.subarray(offset, offset + policyLength));
    offset += policyLength;
    const dataLength = view.getUint32(offset);
    offset += 4;
    need(offset, dataLength);
    const data = frame.slice(offset, offset + dataLength);
    offset += dataLength;
    results.push(
      code === RESULT_CODE_SUCCESS
        ? { success: true, policyCode, data }
        : { success: false, status, policyCode, error: text.decode(data) },
    );
  }
  if (offset !== frame.byteLength) throw new Error('binary frame response has trailing bytes');
  return { totalSuccess: view.getUint32(12), totalFailed: view.getUint32(16), totalProcessingTime: view.getUint32(20), results };
}
