// The one JSON decoder of the execution API (request bodies and NDJSON stream lines). JSON.parse is
// linear in bytes but its cost grows with the number of values it allocates: 32 MiB of nested or
// empty arrays held the event loop for seconds. A structural scan refuses such documents before
// anything is parsed, and "__proto__" keys by name (JSON.parse would make them own properties that
// merging code could turn into a prototype change). Bodies are scanned and decoded chunk by chunk as
// they arrive, so the only work done in one piece is the final JSON.parse.
// Bytes must be valid UTF-8: a lenient decoder would turn invalid bytes into U+FFFD and the engine
// would encrypt something other than what was sent.
import { isUtf8 } from 'node:buffer';
import type { Readable } from 'node:stream';
import { type EngineError, errors } from '../core/errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects. */
  readonly maxDepth: number;
  /** Values (keys included) in one document. */
  readonly maxValues: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const PROTO = Buffer.from('__proto__');
/** A key spelling "__proto__" with escapes (\u005f…) is at most six bytes per character. */
const MAX_KEY_BYTES = PROTO.length * 6;

function isWhitespace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

function isProto(raw: Buffer): boolean {
  if (raw.equals(PROTO)) return true;
  if (!raw.includes(BACKSLASH)) return false;
  try {
    return JSON.parse(`"${raw.toString('utf8')}"`) === '__proto__';
  } catch {
    return false;
  }
}

/**
 * Counts depth and values of a JSON text fed in chunks (split anywhere) and watches its keys. It only
 * counts: syntax is JSON.parse's job, so a malformed document is reported by the parser.
 */
export class JsonScanner {
  #depth = 0;
  #values = 0;
  #inString = false;
  #escaped = false;
  #inScalar = false;
  /** Bytes of the current string while it is short enough to be a "__proto__" key. */
  #string: Buffer[] = [];
  #stringBytes = 0;
  /** The last string, while what follows it may still be the colon that makes it a key. */
  #candidate: Buffer | undefined;

  constructor(private readonly limits: JsonLimits) {}

  #keep(part: Buffer): void {
    if (this.#stringBytes <= MAX_KEY_BYTES) this.#string.push(part.subarray(0, MAX_KEY_BYTES + 1));
    this.#stringBytes += part.length;
  }

  /** Consumes string bytes from `from`; returns where the string ended (after its quote) or the chunk's end. */
  #inStringUntil(chunk: Buffer, from: number): number {
    let i = from;
    while (i < chunk.length) {
      if (this.#escaped) {
        this.#escaped = false;
        this.#keep(chunk.subarray(i, i + 1));
        i++;
        continue;
      }
      const quote = chunk.indexOf(QUOTE, i);
      const end = quote === -1 ? chunk.length : quote;
      let run = 0;
      while (end - 1 - run >= i && chunk[end - 1 - run] === BACKSLASH) run++;
      if (quote === -1) {
        this.#keep(chunk.subarray(i));
        this.#escaped = run % 2 === 1;
        return chunk.length;
      }
      if (run % 2 === 1) {
        this.#keep(chunk.subarray(i, quote + 1));
        i = quote + 1;
        continue;
      }
      this.#keep(chunk.subarray(i, quote));
      this.#inString = false;
      this.#candidate = this.#stringBytes <= MAX_KEY_BYTES ? Buffer.concat(this.#string) : undefined;
      return quote + 1;
    }
    return i;
  }

  /** Scans one more chunk; the refusal, if the document is now past a limit or has a "__proto__" key. */
  feed(chunk: Buffer): EngineError | undefined {
    let i = 0;
    while (i < chunk.length) {
      if (this.#inString) {
        i = this.#inStringUntil(chunk, i);
        continue;
      }
      const byte = chunk[i] as number;
      if (isWhitespace(byte)) {
        this.#inScalar = false;
        i++;
        continue;
      }
      if (byte === COLON && this.#candidate && isProto(this.#candidate)) {
        return errors.decode('"__proto__" keys are not accepted');
      }
      this.#candidate = undefined;
      switch (byte) {
        case QUOTE:
          this.#inString = true;
          this.#string = [];
          this.#stringBytes = 0;
          this.#values++;
          this.#inScalar = false;
          break;
        case 0x5b:
        case 0x7b:
          this.#depth++;
          this.#values++;
          this.#inScalar = false;
          if (this.#depth > this.limits.maxDepth) {
            return errors.decode(`JSON nested deeper than ${this.limits.maxDepth} levels`);
          }
          break;
        case 0x5d:
        case 0x7d:
        case 0x2c:
        case COLON:
          if (byte === 0x5d || byte === 0x7d) this.#depth--;
          this.#inScalar = false;
          break;
        default:
          // The first byte of a number or literal.
          if (!this.#inScalar) this.#values++;
          this.#inScalar = true;
      }
      if (this.#values > this.limits.maxValues) {
        return errors.decode(`JSON holds more than ${this.limits.maxValues} values`);
      }
      i++;
    }
    return undefined;
  }
}

/** Refuses a whole document past the limits (see JsonScanner). */
export function checkJsonLimits(bytes: Buffer, limits: JsonLimits): EngineError | undefined {
  return new JsonScanner(limits).feed(bytes);
}

function parse(text: string, what: 'body' | 'line'): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // JSON.parse messages quote the input: never echo it.
    throw errors.decode(`${what} is not valid JSON`);
  }
}

/** Decodes one JSON document held whole (an NDJSON line). Failures are the catalogue's 400 decode errors. */
export function decodeJson(bytes: Buffer, limits: JsonLimits, what: 'body' | 'line'): unknown {
  if (!isUtf8(bytes)) throw errors.decode(`${what} is not valid UTF-8`);
  const refused = checkJsonLimits(bytes, limits);
  if (refused) throw refused;
  return parse(bytes.toString('utf8'), what);
}

/** Bodies above this size are parsed in a turn of the event loop of their own. */
const LARGE_BODY_BYTES = 1024 * 1024;

export interface BodyLimits extends JsonLimits {
  readonly bodyLimitBytes: number;
}

/**
 * Reads a JSON request body from its stream: checks its size, scans it and decodes it (strict UTF-8)
 * chunk by chunk as it arrives, then parses it. Calls `done` once, with the value or an engine error.
 */
export function readJsonBody(
  payload: Readable,
  contentLength: string | undefined,
  limits: BodyLimits,
  done: (error: Error | null, value?: unknown) => void,
): void {
  const declared = contentLength === undefined ? undefined : Number(contentLength);
  if (declared !== undefined && declared > limits.bodyLimitBytes) {
    done(errors.tooLarge(`request body exceeds ${limits.bodyLimitBytes} bytes`));
    return;
  }
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const scanner = new JsonScanner(limits);
  const parts: string[] = [];
  let received = 0;
  let settled = false;

  const settle = (error: Error | null, value?: unknown) => {
    if (settled) return;
    settled = true;
    payload.removeListener('data', onData);
    payload.removeListener('end', onEnd);
    payload.removeListener('error', onError);
    done(error, value);
  };
  const decode = (chunk?: Buffer): boolean => {
    try {
      parts.push(chunk ? decoder.decode(chunk, { stream: true }) : decoder.decode());
      return true;
    } catch {
      settle(errors.decode('body is not valid UTF-8'));
      return false;
    }
  };
  function onData(chunk: Buffer): void {
    received += chunk.length;
    if (received > limits.bodyLimitBytes) {
      settle(errors.tooLarge(`request body exceeds ${limits.bodyLimitBytes} bytes`));
      return;
    }
    const refused = scanner.feed(chunk);
    if (refused) settle(refused);
    else decode(chunk);
  }
  function onEnd(): void {
    if (declared !== undefined && received !== declared) {
      settle(errors.decode('content length does not match the body'));
      return;
    }
    if (!decode()) return;
    const finish = (text: string) => {
      if (text === '') {
        settle(errors.decode('body is empty'));
        return;
      }
      try {
        settle(null, parse(text, 'body'));
      } catch (error) {
        settle(error as Error);
      }
    };
    if (received <= LARGE_BODY_BYTES) {
      finish(parts.join(''));
      return;
    }
    // Joining and parsing a large body take tens of milliseconds each: each gets a turn of its own,
    // with other connections' I/O handled in between.
    setImmediate(() => {
      const text = parts.join('');
      setImmediate(() => finish(text));
    });
  }
  function onError(error: Error): void {
    settle(error);
  }
  payload.on('data', onData);
  payload.on('end', onEnd);
  payload.on('error', onError);
  payload.resume();
}
