// The one JSON decoder of the execution API (request bodies and NDJSON stream lines). JSON.parse is
// linear in bytes but its cost grows with the number of values it allocates: 32 MiB of nested or
// empty arrays held the event loop for seconds. A structural scan (native indexOf over strings,
// stopping at the first value past the limit) refuses such bodies before anything is allocated.
// Bytes must be valid UTF-8 (the default decoder would turn invalid bytes into U+FFFD and the engine
// would encrypt something other than what was sent), and "__proto__" keys are refused by name.
import { isUtf8 } from 'node:buffer';
import { parse as secureParse } from 'secure-json-parse';
import { EngineError, errors } from '../core/errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects. */
  readonly maxDepth: number;
  /** Values (keys included) in one document. */
  readonly maxValues: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function isDelimiter(byte: number | undefined): boolean {
  // , : [ ] { } " and JSON whitespace end a number or literal.
  return (
    byte === undefined ||
    byte === 0x2c || byte === 0x3a || byte === 0x5b || byte === 0x5d || byte === 0x7b || byte === 0x7d ||
    byte === QUOTE || byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09
  );
}

/** The end of the string starting at `open` (index of its closing quote), or -1 if unterminated. */
function stringEnd(bytes: Buffer, open: number): number {
  let at = open + 1;
  for (;;) {
    const quote = bytes.indexOf(QUOTE, at);
    if (quote === -1) return -1;
    let backslashes = 0;
    while (bytes[quote - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
    at = quote + 1;
  }
}

/**
 * Refuses a document nested deeper or holding more values than the limits allow. Syntax is left to
 * the parser: the scan only counts, so a malformed document is reported as such by JSON.parse.
 */
export function checkJsonLimits(bytes: Buffer, limits: JsonLimits): EngineError | undefined {
  let depth = 0;
  let values = 0;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i];
    switch (byte) {
      case QUOTE: {
        const end = stringEnd(bytes, i);
        if (end === -1) return undefined;
        i = end;
        values++;
        break;
      }
      case 0x5b:
      case 0x7b:
        depth++;
        values++;
        if (depth > limits.maxDepth) return errors.decode(`JSON nested deeper than ${limits.maxDepth} levels`);
        break;
      case 0x5d:
      case 0x7d:
        depth--;
        break;
      case 0x2c:
      case 0x3a:
      case 0x20:
      case 0x0a:
      case 0x0d:
      case 0x09:
        break;
      default:
        // A number or literal: one value, skipped to its end.
        values++;
        while (!isDelimiter(bytes[i + 1])) i++;
    }
    if (values > limits.maxValues) return errors.decode(`JSON holds more than ${limits.maxValues} values`);
  }
  return undefined;
}

const PARSE_OPTIONS = { protoAction: 'error', constructorAction: 'ignore' } as const;

/**
 * Decodes one JSON document. `what` names it in messages ('body' or 'line'); failures are the
 * catalogue's 400 decode errors and never quote the input.
 */
export function decodeJson(bytes: Buffer, limits: JsonLimits, what: 'body' | 'line'): unknown {
  if (!isUtf8(bytes)) throw errors.decode(`${what} is not valid UTF-8`);
  const refused = checkJsonLimits(bytes, limits);
  if (refused) throw refused;
  const text = bytes.toString('utf8');
  if (what === 'body' && text.trim() === '') throw errors.decode('body is empty');
  try {
    return secureParse(text, undefined, PARSE_OPTIONS);
  } catch (error) {
    // secure-json-parse reports a "__proto__" key (in any escaped spelling) with this message.
    if ((error as Error).message.includes('forbidden prototype property')) {
      throw errors.decode('"__proto__" keys are not accepted');
    }
    throw errors.decode(`${what} is not valid JSON`);
  }
}
