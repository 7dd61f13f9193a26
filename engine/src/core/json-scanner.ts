// A structural scan of JSON text, fed in chunks, before anything is parsed. JSON.parse is linear in bytes
// but its cost grows with the values it allocates (32 MiB of nested or empty arrays held the event loop
// for seconds), and it cannot pause: the scan refuses documents past the depth and value limits and
// "__proto__" keys by name (JSON.parse would make them own properties that merging code could turn into
// a prototype change), and it outlines the large containers (json-slices.ts parses those in pieces).
// It only counts and outlines: syntax is JSON.parse's job, so a malformed document is reported there.
import { type EngineError, errors } from './errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects. */
  readonly maxDepth: number;
  /** Values (keys included) in one document. */
  readonly maxValues: number;
}

/**
 * An array or object spanning more than the piece size, as the scan found it. Its members are cut into
 * pieces at some of its commas: each piece is either a run of small members (about a piece's size) or
 * one member holding a large container (its only value, with its key in an object).
 */
export interface JsonContainer {
  /** Byte offsets of its opening and closing bracket. */
  readonly open: number;
  readonly close: number;
  readonly object: boolean;
  /** Byte offsets of the commas (at its own level) where it is cut, ascending. */
  readonly cuts: readonly number[];
  /** Its members that are large containers, ascending. */
  readonly large: readonly JsonContainer[];
}

interface Frame {
  readonly open: number;
  readonly object: boolean;
  readonly cuts: number[];
  readonly large: JsonContainer[];
  lastCut: number;
  lastComma: number;
  /** A large member just closed: the next comma ends its piece. */
  cutNext: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const PROTO = Buffer.from('__proto__');
/** A key spelling "__proto__" with escapes (\u005f…) is at most six bytes per character. */
const MAX_KEY_BYTES = PROTO.length * 6;

export function isJsonWhitespace(byte: number): boolean {
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
 * Counts depth and values of a JSON text fed in chunks (split anywhere) and watches its keys; with a
 * piece size, also outlines every container larger than it (see JsonContainer).
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
  /** Bytes fed before the current chunk. */
  #offset = 0;
  readonly #frames: Frame[] = [];
  #root: JsonContainer | undefined;
  #unbalanced = false;

  /** `pieceBytes`: outline containers larger than this (none when not given). */
  constructor(
    private readonly limits: JsonLimits,
    private readonly pieceBytes = Number.POSITIVE_INFINITY,
  ) {}

  /**
   * The first large container at the top level, if any, and whether the brackets balanced (every
   * container closed, no stray closer, no string left open). Read once the whole text was fed.
   */
  get outline(): { readonly root: JsonContainer | undefined; readonly balanced: boolean } {
    return { root: this.#root, balanced: !this.#unbalanced && !this.#inString && this.#frames.length === 0 && this.#depth === 0 };
  }

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

  #open(at: number, object: boolean): void {
    this.#frames.push({ open: at, object, cuts: [], large: [], lastCut: at, lastComma: at, cutNext: false });
  }

  #close(at: number): void {
    const frame = this.#frames.pop();
    if (!frame) {
      this.#unbalanced = true;
      return;
    }
    if (at - frame.open + 1 <= this.pieceBytes) return;
    const container: JsonContainer = { open: frame.open, close: at, object: frame.object, cuts: frame.cuts, large: frame.large };
    const parent = this.#frames[this.#frames.length - 1];
    if (!parent) {
      this.#root ??= container;
      return;
    }
    // A large member gets a piece of its own: cut at the comma before it and at the one after it.
    if (parent.lastComma > parent.lastCut) {
      parent.cuts.push(parent.lastComma);
      parent.lastCut = parent.lastComma;
    }
    parent.large.push(container);
    parent.cutNext = true;
  }

  #comma(at: number): void {
    const frame = this.#frames[this.#frames.length - 1];
    if (!frame) return;
    frame.lastComma = at;
    if (frame.cutNext || at - frame.lastCut >= this.pieceBytes) {
      frame.cuts.push(at);
      frame.lastCut = at;
      frame.cutNext = false;
    }
  }

  /** Scans one more chunk; the refusal, if the document is now past a limit or has a "__proto__" key. */
  feed(chunk: Buffer): EngineError | undefined {
    const outlining = this.pieceBytes !== Number.POSITIVE_INFINITY;
    let i = 0;
    // A string open at the end of the last chunk (even one that only began there) goes on from here.
    if (this.#inString) this.#stringStart = 0;
    try {
      while (i < chunk.length) {
        if (this.#inString) {
          i = this.#inStringUntil(chunk, i);
          continue;
        }
        const byte = chunk[i] as number;
        if (isJsonWhitespace(byte)) {
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
            if (outlining) this.#open(this.#offset + i, byte === 0x7b);
            break;
          case 0x5d:
          case 0x7d:
            this.#depth--;
            this.#inScalar = false;
            if (outlining) this.#close(this.#offset + i);
            break;
          case COMMA:
            this.#inScalar = false;
            if (outlining) this.#comma(this.#offset + i);
            break;
          case COLON:
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
    } finally {
      this.#offset += chunk.length;
    }
  }
}
