// Each execution route states the media types it accepts; anything else is a 415 with a clear body,
// and so is a JSON or NDJSON body declared in a charset other than UTF-8 (it would be misread).
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { errors } from '../core/errors.js';

export function mediaType(request: FastifyRequest): string {
  return (request.headers['content-type'] ?? '').split(';', 1)[0]?.trim().toLowerCase() ?? '';
}

/** Text types the engine decodes as UTF-8, whatever charset a client claims; another charset is refused. */
const UTF8_TYPES = new Set(['application/json', 'application/x-ndjson']);

/** The charset parameter of the Content-Type header, lower-cased and unquoted, if any. */
function charset(request: FastifyRequest): string | undefined {
  for (const param of (request.headers['content-type'] ?? '').split(';').slice(1)) {
    const [name, value] = param.split('=', 2);
    if (name?.trim().toLowerCase() === 'charset') return (value ?? '').trim().replace(/^"(.*)"$/, '$1').toLowerCase();
  }
  return undefined;
}

/** An onRequest hook: the type is refused before any of the body is read or parsed. */
export function accepts(...types: string[]): onRequestHookHandler {
  return (request: FastifyRequest, _reply: FastifyReply, done) => {
    const type = mediaType(request);
    if (!types.includes(type)) {
      done(errors.unsupportedMediaType(request.headers['content-type'] ?? ''));
      return;
    }
    const declared = UTF8_TYPES.has(type) ? charset(request) : undefined;
    done(declared === undefined || declared === 'utf-8' || declared === 'utf8' ? undefined : errors.unsupportedCharset(declared));
  };
}
