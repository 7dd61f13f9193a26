// NDJSON stream transform: splits incoming bytes into lines without ever holding more than one line
// (bounded by maxLineBytes), maps each line to one output line, and pushes one chunk of output per
// input chunk. Backpressure comes from the stream pipeline: when the client stops reading the
// responses, the engine stops reading its requests.
import { isUtf8 } from 'node:buffer';
import { Transform, type TransformCallback } from 'node:stream';

export const NDJSON_TYPE = 'application/x-ndjson';
const NEWLINE = 0x0a;

export interface LineHandlers {
  /** Maps one request line (without its newline; as text and as its bytes) to one response line (without newline). */
  readonly line: (text: string, bytes: Buffer) => string;
  /** The response line for a request line over the size limit. */
  readonly tooLong: () => string;
  /** The response line for a request line that is not valid UTF-8. */
  readonly notUtf8: () => string;
}

export interface NdjsonTransform extends Transform {
  /** Ends the output with one last line; request bytes still buffered or arriving are ignored. */
  abort(lastLine: string): void;
}

export function ndjsonTransform(handlers: LineHandlers, maxLineBytes: number): NdjsonTransform {
  let aborted = false;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let discarding = false;

  const finishLine = (out: string[], tail: Buffer): void => {
    if (discarding) {
      discarding = false;
      return;
    }
    const whole = pending.length === 0 ? tail : Buffer.concat([...pending, tail]);
    pending = [];
    pendingBytes = 0;
    if (!isUtf8(whole)) {
      out.push(handlers.notUtf8());
      return;
    }
    const bytes = whole[whole.length - 1] === 0x0d ? whole.subarray(0, -1) : whole;
    const text = bytes.toString('utf8');
    // Blank lines carry no request and get no response (a trailing newline is common).
    if (text.trim() === '') return;
    out.push(handlers.line(text, bytes));
  };

  const keep = (out: string[], part: Buffer): void => {
    if (discarding) return;
    if (pendingBytes + part.length > maxLineBytes) {
      // Answer the oversized line now and drop the rest of it as it arrives: nothing accumulates.
      pending = [];
      pendingBytes = 0;
      discarding = true;
      out.push(handlers.tooLong());
      return;
    }
    pending.push(part);
    pendingBytes += part.length;
  };

  const transform = new Transform({
    transform(chunk: Buffer, _encoding, callback: TransformCallback) {
      if (aborted) {
        callback();
        return;
      }
      const out: string[] = [];
      let start = 0;
      let nl = chunk.indexOf(NEWLINE, start);
      try {
        while (nl !== -1) {
          const line = chunk.subarray(start, nl);
          if (!discarding && pendingBytes + line.length > maxLineBytes) {
            keep(out, line);
          }
          finishLine(out, line);
          start = nl + 1;
          nl = chunk.indexOf(NEWLINE, start);
        }
        if (start < chunk.length) keep(out, chunk.subarray(start));
      } catch (error) {
        callback(error as Error);
        return;
      }
      callback(null, out.length > 0 ? `${out.join('\n')}\n` : undefined);
    },
    flush(callback: TransformCallback) {
      if (aborted) {
        callback();
        return;
      }
      const out: string[] = [];
      if (pendingBytes > 0) finishLine(out, Buffer.alloc(0));
      discarding = false;
      callback(null, out.length > 0 ? `${out.join('\n')}\n` : undefined);
    },
  }) as NdjsonTransform;
  transform.abort = (lastLine: string) => {
    if (aborted) return;
    aborted = true;
    pending = [];
    transform.push(`${lastLine}\n`);
    transform.push(null);
  };
  return transform;
}
