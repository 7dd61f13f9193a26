// The binary frame (application/x-svc-binary-frame), version 1: a length-prefixed layout that carries
// raw bytes, so non-UTF-8 plaintext works. Byte-by-byte description: docs/binary-frame.md.
// All integers are big-endian. Decoding never trusts a length: every read is bounds-checked and any
// deviation is a `decode request` error.
import type { EngineError } from '../../core/errors.js';
import { errors } from '../../core/errors.js';
import type { RawBytesItem } from '../../core/execution-service.js';

export const BINARY_FRAME_TYPE = 'application/x-svc-binary-frame';
export const MAGIC = Buffer.from('SVCF', 'latin1');
export const FRAME_VERSION = 1;
export const REQUEST_HEADER_LENGTH = 12;
export const RESPONSE_HEADER_LENGTH = 24;

export const Operation = {
  encrypt: 0x01,
  decrypt: 0x02,
  /** Ciphertext items in (as decrypt), ciphertexts under the newest key version out (as encrypt). */
  rewrap: 0x03,
  encryptResult: 0x81,
  decryptResult: 0x82,
  rewrapResult: 0x83,
} as const;

export type FrameOperation = 'encrypt' | 'decrypt' | 'rewrap';

const RESULT_OPERATION: Record<FrameOperation, number> = {
  encrypt: Operation.encryptResult,
  decrypt: Operation.decryptResult,
  rewrap: Operation.rewrapResult,
};

export const RefKind = { policyCode: 0x01, policyName: 0x02 } as const;
export const ITEM_SUCCESS = 1000;
export const ITEM_FAILURE = 2000;

export type DecodedFrame = (
  | { readonly operation: 'encrypt'; readonly items: RawBytesItem[] }
  | { readonly operation: 'decrypt' | 'rewrap'; readonly items: string[] }
) & {
  /**
   * Where each item starts in the frame, and offsets[count] where the last ends: items i to j-1 are the
   * bytes offsets[i] to offsets[j], which decodeFrameItems reads again (a crypto worker's slice).
   */
  readonly offsets: Uint32Array;
};

/** One result item: data on success, or the failure (its message and the status a single request would get). */
export type FrameResult =
  | { readonly ok: true; readonly policyCode: string; readonly data: Uint8Array | string }
  | { readonly ok: false; readonly policyCode?: string; readonly error: EngineError };

class Reader {
  offset = 0;
  constructor(readonly buf: Buffer) {}

  need(n: number, what: string): void {
    if (this.buf.length - this.offset < n) throw errors.decode(`binary frame truncated in ${what}`);
  }
  u8(what: string): number {
    this.need(1, what);
    return this.buf.readUInt8(this.offset++);
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.buf.readUInt16BE(this.offset);
    this.offset += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.buf.readUInt32BE(this.offset);
    this.offset += 4;
    return v;
  }
  bytes(n: number, what: string): Buffer {
    this.need(n, what);
    const v = this.buf.subarray(this.offset, this.offset + n);
    this.offset += n;
    return v;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Items decoded between two turns of the event loop when a frame is decoded in steps. */
const DECODE_STEP_ITEMS = 1024;

/**
 * Decodes a request frame for the given endpoint. `maxItems` is checked before anything is allocated
 * for the items, so a forged count cannot make the engine allocate.
 */
export function decodeRequestFrame(buf: Buffer, expected: FrameOperation, maxItems: number): DecodedFrame {
  const steps = decodeSteps(buf, expected, maxItems);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * The same decoding, with `turn` awaited between steps of DECODE_STEP_ITEMS items: a frame of the
 * largest size takes tens of milliseconds to decode, more than one request may hold the event loop.
 */
export async function decodeRequestFrameInSteps(
  buf: Buffer,
  expected: FrameOperation,
  maxItems: number,
  turn: () => Promise<void>,
): Promise<DecodedFrame> {
  const steps = decodeSteps(buf, expected, maxItems);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    await turn();
  }
}

function* decodeSteps(buf: Buffer, expected: FrameOperation, maxItems: number): Generator<void, DecodedFrame> {
  const r = new Reader(buf);
  if (!r.bytes(4, 'magic').equals(MAGIC)) throw errors.decode('not a binary frame (bad magic)');
  const version = r.u8('version');
  if (version !== FRAME_VERSION) throw errors.decode(`unsupported binary frame version ${version}`);
  const operation = r.u8('operation');
  if (operation !== Operation[expected])
    throw errors.decode(`binary frame operation does not match the ${expected} endpoint`);
  if (r.u16('reserved') !== 0) throw errors.decode('binary frame reserved field must be 0');
  const count = r.u32('item count');
  if (count > maxItems) throw errors.tooManyItems(count, maxItems);
  // Every item is at least 4 bytes (decrypt) or 11 bytes (encrypt): reject impossible counts before looping.
  if (count * (expected === 'encrypt' ? 11 : 4) > buf.length - REQUEST_HEADER_LENGTH) {
    throw errors.decode('binary frame item count exceeds the frame');
  }
  const read = itemReader(expected);
  const items: (RawBytesItem | string)[] = [];
  const offsets = new Uint32Array(count + 1);
  for (let i = 0; i < count; i++) {
    if (i > 0 && i % DECODE_STEP_ITEMS === 0) yield;
    offsets[i] = r.offset;
    items.push(read(r, i));
  }
  offsets[count] = r.offset;
  finish(r);
  return { operation: expected, items, offsets } as DecodedFrame;
}

/**
 * The items of a run of a decoded frame's items (the bytes from offsets[i] to offsets[j], copied), read
 * again by the same rules: how a crypto worker gets its slice of a frame as one buffer instead of a copy
 * of every item object.
 */
export function decodeFrameItems(operation: FrameOperation, bytes: Buffer, count: number): RawBytesItem[] | string[] {
  const r = new Reader(bytes);
  const read = itemReader(operation);
  const items: (RawBytesItem | string)[] = [];
  for (let i = 0; i < count; i++) items.push(read(r, i));
  finish(r);
  return items as RawBytesItem[] | string[];
}

/** Reads one item of a request frame: a ciphertext (decrypt, rewrap) or a policy reference and data (encrypt). */
function itemReader(operation: FrameOperation): (r: Reader, i: number) => RawBytesItem | string {
  if (operation !== 'encrypt') return (r, i) => r.bytes(r.u32(`item ${i} length`), `item ${i} data`).toString('latin1');
  let lastRefBytes: Buffer = Buffer.alloc(0);
  let lastRef = '';
  return (r, i) => {
    const kind = r.u8(`item ${i} policy kind`);
    const version = r.u32(`item ${i} policy version`);
    const refBytes = r.bytes(r.u16(`item ${i} policy length`), `item ${i} policy`);
    const data = r.bytes(r.u32(`item ${i} length`), `item ${i} data`);
    // Batches usually repeat one policy: decode its name once.
    if (!refBytes.equals(lastRefBytes)) {
      try {
        lastRef = utf8.decode(refBytes);
      } catch {
        throw errors.decode(`item ${i} policy reference is not UTF-8`);
      }
      lastRefBytes = refBytes;
    }
    const ref = lastRef;
    if (kind !== RefKind.policyCode && kind !== RefKind.policyName)
      throw errors.decode(`item ${i} has unknown policy kind ${kind}`);
    // Rule violations (such as a version with a policy code) fail that item in the core, not the frame.
    const policyVersion = version === 0 ? undefined : version;
    return kind === RefKind.policyCode ? { data, policyCode: ref, policyVersion } : { data, policyName: ref, policyVersion };
  };
}

function finish(r: Reader): void {
  if (r.offset !== r.buf.length) throw errors.decode('binary frame has trailing bytes');
}

export interface FrameTotals {
  readonly totalSuccess: number;
  readonly totalFailed: number;
  readonly totalProcessingTime: number;
}

function resultItemsSize(results: readonly FrameResult[]): number {
  let size = 0;
  for (const r of results) {
    const data = r.ok ? r.data : r.error.message;
    size += 10 + Buffer.byteLength(r.policyCode ?? '', 'utf8') + (typeof data === 'string' ? Buffer.byteLength(data, r.ok ? 'latin1' : 'utf8') : data.length);
  }
  return size;
}

function writeResultItems(results: readonly FrameResult[], out: Buffer, offset: number): number {
  let o = offset;
  for (const r of results) {
    o = out.writeUInt16BE(r.ok ? ITEM_SUCCESS : ITEM_FAILURE, o);
    o = out.writeUInt16BE(r.ok ? 0 : r.error.status, o);
    const codeLength = out.write(r.policyCode ?? '', o + 2, 'utf8');
    o = out.writeUInt16BE(codeLength, o) + codeLength;
    const data = r.ok ? r.data : r.error.message;
    let dataLength: number;
    if (typeof data === 'string') {
      dataLength = out.write(data, o + 4, r.ok ? 'latin1' : 'utf8');
    } else {
      out.set(data, o + 4);
      dataLength = data.length;
    }
    o = out.writeUInt32BE(dataLength, o) + dataLength;
  }
  return o;
}

function writeResponseHeader(out: Buffer, operation: FrameOperation, count: number, totals: FrameTotals): void {
  MAGIC.copy(out, 0);
  out.writeUInt8(FRAME_VERSION, 4);
  out.writeUInt8(RESULT_OPERATION[operation], 5);
  out.writeUInt16BE(0, 6);
  out.writeUInt32BE(count, 8);
  out.writeUInt32BE(totals.totalSuccess, 12);
  out.writeUInt32BE(totals.totalFailed, 16);
  out.writeUInt32BE(Math.min(totals.totalProcessingTime, 0xffff_ffff), 20);
}

export function encodeResponseFrame(
  operation: FrameOperation,
  results: readonly FrameResult[],
  totals: FrameTotals,
): Buffer {
  // Sized first, then written in place: no per-item buffers (ciphertexts are ASCII, written as latin1).
  const out = Buffer.allocUnsafe(RESPONSE_HEADER_LENGTH + resultItemsSize(results));
  writeResponseHeader(out, operation, results.length, totals);
  writeResultItems(results, out, RESPONSE_HEADER_LENGTH);
  return out;
}

/**
 * A slice of result items as they appear in a response frame, in memory of its own (not Node's shared
 * pool) so a crypto worker can transfer it to the main thread without copying (docs/workers.md).
 */
export function encodeResultItems(results: readonly FrameResult[]): Buffer {
  const out = Buffer.allocUnsafeSlow(resultItemsSize(results));
  writeResultItems(results, out, 0);
  return out;
}

/** A response frame from slices of result items (encodeResultItems), in order. */
export function joinResponseFrame(
  operation: FrameOperation,
  count: number,
  slices: readonly Uint8Array[],
  totals: FrameTotals,
): Buffer {
  let size = RESPONSE_HEADER_LENGTH;
  for (const slice of slices) size += slice.length;
  const out = Buffer.allocUnsafe(size);
  writeResponseHeader(out, operation, count, totals);
  let o = RESPONSE_HEADER_LENGTH;
  for (const slice of slices) {
    out.set(slice, o);
    o += slice.length;
  }
  return out;
}

/** Client-side helpers (used by tests, benchmarks and any TypeScript client). */
export function encodeRequestFrame(
  operation: FrameOperation,
  items: readonly { policyCode?: string; policyName?: string; policyVersion?: number; data: Uint8Array | string }[],
): Buffer {
  const chunks: Buffer[] = [];
  const header = Buffer.alloc(REQUEST_HEADER_LENGTH);
  MAGIC.copy(header, 0);
  header.writeUInt8(FRAME_VERSION, 4);
  header.writeUInt8(Operation[operation], 5);
  header.writeUInt32BE(items.length, 8);
  chunks.push(header);
  for (const item of items) {
    const data = typeof item.data === 'string' ? Buffer.from(item.data, 'utf8') : Buffer.from(item.data);
    if (operation === 'encrypt') {
      const ref = Buffer.from(item.policyCode ?? item.policyName ?? '', 'utf8');
      const head = Buffer.alloc(7);
      head.writeUInt8(item.policyCode !== undefined ? RefKind.policyCode : RefKind.policyName, 0);
      head.writeUInt32BE(item.policyVersion ?? 0, 1);
      head.writeUInt16BE(ref.length, 5);
      chunks.push(head, ref);
    }
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length, 0);
    chunks.push(len, data);
  }
  return Buffer.concat(chunks);
}

export interface DecodedResponseItem {
  readonly code: number;
  readonly status: number;
  readonly policyCode: string;
  readonly data: Buffer;
}

export function decodeResponseFrame(buf: Buffer): {
  operation: number;
  totals: FrameTotals;
  items: DecodedResponseItem[];
} {
  const r = new Reader(buf);
  if (!r.bytes(4, 'magic').equals(MAGIC)) throw errors.decode('not a binary frame (bad magic)');
  if (r.u8('version') !== FRAME_VERSION) throw errors.decode('unsupported binary frame version');
  const operation = r.u8('operation');
  r.u16('reserved');
  const count = r.u32('item count');
  const totals = { totalSuccess: r.u32('totals'), totalFailed: r.u32('totals'), totalProcessingTime: r.u32('totals') };
  const items: DecodedResponseItem[] = [];
  for (let i = 0; i < count; i++) {
    const code = r.u16('code');
    const status = r.u16('status');
    const policyCode = r.bytes(r.u16('policy length'), 'policy').toString('utf8');
    items.push({ code, status, policyCode, data: r.bytes(r.u32('length'), 'data') });
  }
  finish(r);
  return { operation, totals, items };
}
