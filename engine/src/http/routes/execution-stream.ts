// POST /api/encrypt/stream and /api/decrypt/stream: NDJSON in, NDJSON out, one response line per
// request line, in order, processed as it arrives. A bad line gets an error line; the stream goes on.
// Every response line has the single response body shape, so an error line always carries
// `"success": false` and `error`, whatever the error's shape as a whole response would be.
import { pipeline, type Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Limits } from '../../config.js';
import { EngineError, errors } from '../../core/errors.js';
import type { ExecutionService, ItemSuccess } from '../../core/execution-service.js';
import { NDJSON_TYPE, type NdjsonTransform, ndjsonTransform } from '../codecs/ndjson.js';
import { accepts } from '../content-type.js';
import { decodeJson } from '../json-body.js';
import { errorResponses } from '../schemas.js';

type LineProcessor = (body: unknown) => ItemSuccess;

/** One NDJSON error line, in the single response body shape. */
export function errorLine(error: EngineError): string {
  return JSON.stringify({ success: false, error: error.message });
}

/**
 * A stream may last long while it keeps moving: it ends with an error line once no byte has moved on
 * its connection, in either direction, for streamIdleTimeoutMs (a client that stops sending, or stops
 * reading the answers so that backpressure stops the engine reading), or once it has lasted
 * streamTimeoutMs. The connection is then closed, so a client trickling bytes cannot hold it open.
 */
function guardStream(request: FastifyRequest, reply: FastifyReply, input: Readable, output: NdjsonTransform, limits: Limits): void {
  const socket = request.raw.socket;
  const moved = () => socket.bytesRead + socket.bytesWritten;
  let lastBytes = moved();
  let lastMove = performance.now();
  const stop = (error: EngineError) => {
    clearInterval(idle);
    clearTimeout(total);
    input.unpipe(output);
    input.pause();
    reply.raw.once('finish', () => socket.destroySoon());
    output.abort(errorLine(error));
  };
  const idle = setInterval(
    () => {
      const bytes = moved();
      const now = performance.now();
      if (bytes !== lastBytes) {
        lastBytes = bytes;
        lastMove = now;
      } else if (now - lastMove >= limits.streamIdleTimeoutMs) {
        stop(errors.streamTimeout(`no data moved for ${limits.streamIdleTimeoutMs} ms`));
      }
    },
    Math.max(50, Math.min(1_000, limits.streamIdleTimeoutMs / 4)),
  );
  const total = setTimeout(
    () => stop(errors.streamTimeout(`stream lasted ${limits.streamTimeoutMs} ms`)),
    limits.streamTimeoutMs,
  );
  reply.raw.once('close', () => {
    clearInterval(idle);
    clearTimeout(total);
  });
}

/**
 * Registers one NDJSON route over a single-request processor (encrypt, decrypt, rewrap): one response
 * line per request line; every line's outcome goes to the call's audit summary (one event per stream).
 */
export function ndjsonRoute(
  app: FastifyInstance,
  path: string,
  execution: ExecutionService,
  process: LineProcessor,
  limits: Limits,
): void {
  const maxLineBytes = limits.maxStreamLineBytes;
  const json = { maxDepth: limits.maxJsonDepth, maxValues: limits.maxJsonValues };
  const tooLong = errorLine(errors.tooLarge(`line exceeds ${maxLineBytes} bytes`));
  const notUtf8 = errorLine(errors.decode('line is not valid UTF-8'));

  app.post(
    path,
    {
      onRequest: accepts(NDJSON_TYPE),
      schema: {
        description: 'NDJSON: one single request body per line in, one single response body per line out',
        response: errorResponses,
      },
    },
    (request, reply) => {
      execution.snapshot(); // answer 503 up front rather than one error line per request line
      const summary = request.auditSummary;
      const line = (_text: string, bytes: Buffer): string => {
        let body: unknown;
        try {
          body = decodeJson(bytes, json, 'line');
          const result = process(body);
          summary?.add(result, body);
          return JSON.stringify({ success: true, data: result.data, policyCode: result.policyCode });
        } catch (error) {
          if (error instanceof EngineError) {
            summary?.failItem(error.code);
            return errorLine(error);
          }
          throw error;
        }
      };
      const input = request.body as Readable;
      const transform = ndjsonTransform(
        {
          line,
          tooLong: () => {
            summary?.failItem('PAYLOAD_TOO_LARGE');
            return tooLong;
          },
          notUtf8: () => {
            summary?.failItem('DECODE');
            return notUtf8;
          },
        },
        maxLineBytes,
      );
      guardStream(request, reply, input, transform, limits);
      const out = pipeline(input, transform, (error) => {
        if (error) request.log.debug({ err: error }, 'stream ended early');
      });
      return reply.type(NDJSON_TYPE).send(out);
    },
  );
}

export interface StreamRoutesOptions {
  readonly execution: ExecutionService;
  readonly limits: Limits;
}

export const streamRoutes: FastifyPluginAsync<StreamRoutesOptions> = async (app, { execution, limits }) => {
  ndjsonRoute(app, '/api/encrypt/stream', execution, execution.encryptOne.bind(execution), limits);
  ndjsonRoute(app, '/api/decrypt/stream', execution, execution.decryptOne.bind(execution), limits);
};
