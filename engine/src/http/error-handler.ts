// The one place where failures become HTTP responses. Engine errors render the contract's bodies;
// Fastify's own errors (body parsing, limits, content types) are mapped into the same catalogue; anything
// else is a 500 with a fixed message, its detail only in the log.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EngineError, errors } from '../core/errors.js';

export function toEngineError(error: FastifyError | Error, request: FastifyRequest, bodyLimit: number): EngineError {
  if (error instanceof EngineError) return error;
  const code = (error as FastifyError).code;
  switch (code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.unsupportedMediaType(request.headers['content-type'] ?? '');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errors.tooLarge(`request body exceeds ${bodyLimit} bytes`);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return errors.decode('body is empty');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return errors.decode('content length does not match the body');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return errors.decode('body is not valid JSON');
  }
  // JSON.parse messages quote the body; never echo request data back or into logs.
  if (error instanceof SyntaxError || (error as FastifyError).statusCode === 400) {
    return errors.decode('body is not valid JSON');
  }
  if ((error as FastifyError).statusCode === 408) return errors.requestTimeout();
  return errors.internal();
}

export function sendError(reply: FastifyReply, error: EngineError): FastifyReply {
  // JSON.stringify keeps the contract's field order (success before error) for both shapes.
  return reply.code(error.status).type('application/json').serializer(JSON.stringify).send(error.body());
}

export function installErrorHandler(app: FastifyInstance, bodyLimit: number): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const mapped = toEngineError(error, request, bodyLimit);
    if (mapped.status >= 500) request.log.error({ err: error }, 'request failed');
    return sendError(reply, mapped);
  });
}
