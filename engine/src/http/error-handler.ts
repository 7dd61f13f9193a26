// The one place where failures become HTTP responses. Engine errors render the contract's bodies;
// Fastify's own errors (body parsing, limits, content types) are mapped into the same catalogue; anything
// else is a 500 with a fixed message, its detail only in the log.
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EngineError, errors } from '../core/errors.js';

export function toEngineError(error: FastifyError | Error, request: FastifyRequest, bodyLimit: number): EngineError {
  if (error instanceof EngineError) return error;
  const code = (error as FastifyError).code;
  switch (code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return errors.unsupportedMediaType(request.headers['content-type'] ?? '');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return errors.tooLarge(`request body exceeds ${request.routeOptions.bodyLimit ?? bodyLimit} bytes`);
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

const REASONS: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

/** Whether the bytes Node failed on start a HEAD request, whose answer must not carry a body. */
function isHead(error: { rawPacket?: unknown }): boolean {
  return Buffer.isBuffer(error.rawPacket) && error.rawPacket.subarray(0, 5).toString('latin1') === 'HEAD ';
}

/**
 * Errors Node's HTTP parser raises before Fastify sees a request (malformed request line, bad chunking,
 * a request that takes longer than the request timeout): answered on the raw socket, in the same catalogue.
 */
export function clientErrorHandler(error: Error & { code?: string; rawPacket?: unknown }, socket: Socket): void {
  // A response already under way (a stream whose request body turned malformed) cannot take another
  // status line: the connection is closed, as Node itself does.
  const inProgress = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (error.code === 'ECONNRESET' || !socket.writable || inProgress) {
    socket.destroy();
    return;
  }
  const mapped =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? errors.requestTimeout()
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? errors.headersTooLarge()
        : errors.malformedHttp();
  const body = JSON.stringify(mapped.body());
  socket.end(
    `HTTP/1.1 ${mapped.status} ${REASONS[mapped.status]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${isHead(error) ? '' : body}`,
  );
}

/** Fastify's router errors (an undecodable URL) in the same catalogue. */
export function frameworkErrors(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  sendError(reply, error.code === 'FST_ERR_BAD_URL' ? errors.decode('the URL is not valid') : errors.internal());
}

export function sendError(reply: FastifyReply, error: EngineError): FastifyReply {
  // JSON.stringify keeps the contract's field order (success before error) for both shapes.
  return reply.code(error.status).type('application/json').serializer(JSON.stringify).send(error.body());
}

export function installErrorHandler(app: FastifyInstance, bodyLimit: number): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const mapped = toEngineError(error, request, bodyLimit);
    // Only the unexpected carries a stack; expected unavailability (hub, store, drain) is a warning.
    if (mapped.code === 'INTERNAL') request.log.error({ err: error }, 'request failed');
    else if (mapped.status >= 500) request.log.warn({ status: mapped.status }, mapped.message);
    return sendError(reply, mapped);
  });
}
