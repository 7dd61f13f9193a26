// Each execution route states the media types it accepts; anything else is a 415 with a clear body.
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { errors } from '../core/errors.js';

export function mediaType(request: FastifyRequest): string {
  return (request.headers['content-type'] ?? '').split(';', 1)[0]?.trim().toLowerCase() ?? '';
}

/** An onRequest hook: the type is refused before any of the body is read or parsed. */
export function accepts(...types: string[]): onRequestHookHandler {
  return (request: FastifyRequest, _reply: FastifyReply, done) => {
    const type = mediaType(request);
    done(types.includes(type) ? undefined : errors.unsupportedMediaType(request.headers['content-type'] ?? ''));
  };
}
