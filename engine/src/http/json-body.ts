// The one JSON decoder of the execution API (request bodies and NDJSON stream lines). JSON.parse is
// linear in bytes but its cost grows with the number of values it allocates: 32 MiB of nested or
// empty arrays held the event loop for seconds. A structural scan refuses such documents before
// anything is parsed, and "__proto__" keys by name (JSON.parse would make them own properties that
// merging code could turn into a prototype change). A large body is handled in steps, each in a turn
// of the event loop of its own, so the longest piece of work done at once is its JSON.parse.
// Bytes must be valid UTF-8: a lenient decoder would turn invalid bytes into U+FFFD and the engine
// would encrypt something other than what was sent.
import { isUtf8 } from 'node:buffer';
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

function hasBackslash(bytes: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i] === BACKSLASH) return true;
  return false;
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
  /** Where the current string's content starts in the chunk being scanned (0 once it crossed a chunk). */
  #stringStart = 0;
  /** The current string's bytes from earlier chunks (kept while short enough to be a key of interest). */
  #spill: Buffer[] | undefined;
  #spillBytes = 0;
  /** Whether the last string spelled "__proto__"; it is refused if a colon follows (it is a key). */
  #candidate = false;

  constructor(private readonly limits: JsonLimits) {}

  #endString(chunk: Buffer, quote: number): void {
    this.#inString = false;
    const start = this.#stringStart;
    if (this.#spill) {
      const total = this.#spillBytes + quote - start;
      this.#candidate = total <= MAX_KEY_BYTES && isProto(Buffer.concat([...this.#spill, chunk.subarray(start, quote)]));
      this.#spill = undefined;
      return;
    }
    const length = quote - start;
    if (length === PROTO.length) this.#candidate = chunk.compare(PROTO, 0, PROTO.length, start, quote) === 0;
    else if (length <= MAX_KEY_BYTES && hasBackslash(chunk, start, quote)) {
      this.#candidate = isProto(chunk.subarray(start, quote));
    } else this.#candidate = false;
  }

  /** Consumes string bytes from `from`; returns where the string ended (after its quote) or the chunk's end. */
  #inStringUntil(chunk: Buffer, from: number): number {
    let i = from;
    if (this.#escaped) {
      this.#escaped = false;
      i++;
    }
    while (i < chunk.length) {
      const quote = chunk.indexOf(QUOTE, i);
      const end = quote === -1 ? chunk.length : quote;
      let run = 0;
      while (end - 1 - run >= i && chunk[end - 1 - run] === BACKSLASH) run++;
      if (quote === -1) {
        this.#escaped = run % 2 === 1;
        break;
      }
      if (run % 2 === 0) {
        this.#endString(chunk, quote);
        return quote + 1;
      }
      i = quote + 1;
    }
    // The string goes on in the next chunk: keep what a key of interest could need.
    if (this.#spillBytes <= MAX_KEY_BYTES) {
      this.#spill ??= [];
      this.#spill.push(chunk.subarray(this.#stringStart, this.#stringStart + MAX_KEY_BYTES + 1));
    }
    this.#spillBytes += chunk.length - this.#stringStart;
    this.#stringStart = 0;
    return chunk.length;
  }

  /** Scans one more chunk; the refusal, if the document is now past a limit or has a "__proto__" key. */
  feed(chunk: Buffer): EngineError | undefined {
    let i = 0;
    // A string open at the end of the last chunk (even one that only began there) goes on from here.
    if (this.#inString) this.#stringStart = 0;
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
      if (byte === COLON && this.#candidate) return errors.decode('"__proto__" keys are not accepted');
      this.#candidate = false;
      switch (byte) {
        case QUOTE:
          this.#inString = true;
          this.#stringStart = i + 1;
          this.#spill = undefined;
          this.#spillBytes = 0;
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

/** Bodies above this size are checked, decoded and parsed in turns of the event loop of their own. */
const LARGE_BODY_BYTES = 1024 * 1024;

/** Runs `step` after the I/O of other connections has had a turn (a second setImmediate passes the poll phase). */
function afterOthers(step: () => void): void {
  setImmediate(() => setImmediate(step));
}

/**
 * Decodes a JSON request body (strict UTF-8, limits scanned first, then parsed) and calls `done` once
 * with the value or an engine error. A small body is handled at once; a large one in steps, each in a
 * turn of the event loop of its own (UTF-8 check and scan, decoding, parsing: tens of milliseconds
 * each at the largest size), so other requests are served in between.
 */
export function parseJsonBody(body: Buffer, limits: JsonLimits, done: (error: Error | null, value?: unknown) => void): void {
  const check = (): EngineError | undefined =>
    isUtf8(body) ? checkJsonLimits(body, limits) : errors.decode('body is not valid UTF-8');
  const finish = (text: string) => {
    if (text === '') {
      done(errors.decode('body is empty'));
      return;
    }
    let value: unknown;
    try {
      value = parse(text, 'body');
    } catch (error) {
      done(error as Error);
      return;
    }
    done(null, value);
  };
  if (body.length <= LARGE_BODY_BYTES) {
    const refused = check();
    if (refused) done(refused);
    else finish(body.toString('utf8'));
    return;
  }
  afterOthers(() => {
    const refused = check();
    if (refused) {
      done(refused);
      return;
    }
    afterOthers(() => {
      const text = body.toString('utf8');
      afterOthers(() => finish(text));
    });
  });
}
