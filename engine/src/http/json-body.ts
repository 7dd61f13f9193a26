// The one JSON decoder of the HTTP layer: request bodies (execution and operations API) and NDJSON stream
// lines. Documents are scanned before they are parsed (core/json-scanner.ts: depth, values, "__proto__"
// keys); a large body is decoded as sliced work (core/json-slices.ts), so no turn of the event loop spends
// more than a slice on it, whatever its size within the body limit.
// Execution bodies must be valid UTF-8: a lenient decoder would turn invalid bytes into U+FFFD and the
// engine would encrypt something other than what was sent.
import { isUtf8 } from 'node:buffer';
import { errors } from '../core/errors.js';
import { type JsonRules, parseJsonSliced } from '../core/json-slices.js';
import { runInSlices, runNow } from '../core/time-slices.js';

export interface JsonBodyRules extends JsonRules {
  /** Refuse invalid UTF-8 (the execution API); otherwise it is decoded as U+FFFD, as Fastify's parser did. */
  readonly strictUtf8: boolean;
}

/** Bodies up to this size are decoded at once; larger ones as sliced work. */
const LARGE_BODY_BYTES = 256 * 1024;

/** Decodes one JSON document held whole (an NDJSON line), strict UTF-8. Failures are the catalogue's 400 decode errors. */
export function decodeJson(bytes: Buffer, rules: JsonRules, what: 'body' | 'line'): unknown {
  if (!isUtf8(bytes)) throw errors.decode(`${what} is not valid UTF-8`);
  return runNow(parseJsonSliced(bytes, rules, what));
}

/**
 * Decodes a JSON request body and calls `done` once with the value or an engine error: at once when it
 * is small, as sliced work (other requests served in between) when it is large.
 */
export function parseJsonBody(body: Buffer, rules: JsonBodyRules, done: (error: Error | null, value?: unknown) => void): void {
  if (rules.strictUtf8 && !isUtf8(body)) {
    done(errors.decode('body is not valid UTF-8'));
    return;
  }
  if (body.length === 0) {
    done(errors.decode('body is empty'));
    return;
  }
  if (body.length <= LARGE_BODY_BYTES) {
    let value: unknown;
    try {
      value = runNow(parseJsonSliced(body, rules, 'body'));
    } catch (error) {
      done(error as Error);
      return;
    }
    done(null, value);
    return;
  }
  runInSlices(parseJsonSliced(body, rules, 'body')).then(
    (value) => done(null, value),
    (error: unknown) => done(error as Error),
  );
}
