// Parses JSON text as sliced work (time-slices.ts): a 20 MiB sync body held the event loop for 140 ms in
// JSON.parse alone, which cannot pause. The scan (json-scanner.ts) runs in chunks and outlines every
// container larger than a piece; JSON.parse then parses the document piece by piece (runs of small
// members, each about PIECE_BYTES, wrapped in their container's brackets), and the large containers are
// assembled from their pieces. JSON.parse still checks every byte of syntax but the few between pieces
// (the commas where containers were cut, brackets of large containers, keys of large members), which are
// checked here. The value equals JSON.parse's, and a document JSON.parse refuses is refused.
import secureJsonParse from 'secure-json-parse';
import { errors } from './errors.js';
import { isJsonWhitespace, type JsonContainer, type JsonLimits, JsonScanner } from './json-scanner.js';
import type { Sliced } from './time-slices.js';

/** Bytes parsed at once (well under a millisecond); containers larger than this are parsed in pieces. */
export const PIECE_BYTES = 64 * 1024;
/** Bytes scanned at once (a few milliseconds). */
const SCAN_BYTES = 64 * 1024;

export interface JsonRules extends JsonLimits {
  /**
   * As Fastify's default JSON parser (secure-json-parse), which the operations API used: a leading byte
   * order mark is skipped, and an object whose "constructor" holds a "prototype" is refused as invalid JSON.
   */
  readonly secure?: boolean;
}

const SECURE = { protoAction: 'error', constructorAction: 'error' } as const;

function blank(bytes: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!isJsonWhitespace(bytes[i] as number)) return false;
  return true;
}

/**
 * The value of a JSON text (bytes decoded as UTF-8, invalid sequences as U+FFFD: callers that refuse
 * them check first) as sliced work. Throws the scanner's decode errors (limits, "__proto__" keys) and
 * `decode request: <what> is not valid JSON` for anything JSON.parse would refuse. `pieceBytes` is
 * smaller in tests, so that small documents are cut into pieces too.
 */
export function* parseJsonSliced(text: Buffer, rules: JsonRules, what: string, pieceBytes = PIECE_BYTES): Sliced<unknown> {
  const secure = rules.secure === true;
  const parse = secure ? (piece: string) => secureJsonParse(piece, SECURE) as unknown : JSON.parse;
  const bytes = secure && text[0] === 0xef && text[1] === 0xbb && text[2] === 0xbf ? text.subarray(3) : text;
  const scanner = new JsonScanner(rules, pieceBytes);
  for (let at = 0; at < bytes.length; at += SCAN_BYTES) {
    const refused = scanner.feed(bytes.subarray(at, at + SCAN_BYTES));
    if (refused) throw refused;
    yield;
  }
  const { root, balanced } = scanner.outline;
  try {
    if (!root) return parse(bytes.toString('utf8'));
    if (!balanced || !blank(bytes, 0, root.open) || !blank(bytes, root.close + 1, bytes.length)) throw new SyntaxError();
    return yield* assemble(bytes, root, parse, secure);
  } catch (error) {
    // JSON.parse messages quote the input: never echo it.
    if (error instanceof SyntaxError || error instanceof RangeError) throw errors.decode(`${what} is not valid JSON`);
    throw error;
  }
}

/** A large container's value from its pieces (see JsonContainer). */
function* assemble(bytes: Buffer, container: JsonContainer, parse: (text: string) => unknown, secure: boolean): Sliced<unknown> {
  const { object, cuts, large } = container;
  if (bytes[container.close] !== (object ? 0x7d : 0x5d)) throw new SyntaxError();
  const array: unknown[] = [];
  const fields: Record<string, unknown> = {};
  let next = 0;
  for (let piece = 0; piece <= cuts.length; piece++) {
    const from = (piece === 0 ? container.open : (cuts[piece - 1] as number)) + 1;
    const to = piece === cuts.length ? container.close : (cuts[piece] as number);
    const member = large[next];
    if (member && member.open < to) {
      // One member holding a large container: `"key": {…}` in an object, `[…]` in an array.
      next++;
      const value = yield* assemble(bytes, member, parse, secure);
      if (!blank(bytes, member.close + 1, to)) throw new SyntaxError();
      if (object) {
        // `"key":` and a placeholder: null, because a digit would merge with a number left before the
        // container (`"key":1{…}` would read as `"key":10`).
        const head = parse(`{${bytes.toString('utf8', from, member.open)}null}`) as Record<string, unknown>;
        const keys = Object.keys(head);
        if (keys.length !== 1 || head[keys[0] as string] !== null) throw new SyntaxError();
        const key = keys[0] as string;
        if (secure && key === 'constructor' && Object.hasOwn(value as object, 'prototype')) throw new SyntaxError();
        fields[key] = value;
      } else {
        if (!blank(bytes, from, member.open)) throw new SyntaxError();
        array.push(value);
      }
    } else if (blank(bytes, from, to)) {
      // Only an empty container has a blank piece (`[1,,2]` and `[1,]` are not JSON).
      if (cuts.length > 0) throw new SyntaxError();
    } else if (object) {
      Object.assign(fields, parse(`{${bytes.toString('utf8', from, to)}}`));
    } else {
      for (const value of parse(`[${bytes.toString('utf8', from, to)}]`) as unknown[]) array.push(value);
    }
    yield;
  }
  return object ? fields : array;
}
