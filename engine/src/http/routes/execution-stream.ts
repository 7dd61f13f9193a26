// POST /api/encrypt/stream and /api/decrypt/stream: NDJSON in, NDJSON out, one response line per
// request line, in order, processed as it arrives. A bad line gets an error line; the stream goes on.
import { pipeline, type Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { EngineError, errors } from '../../core/errors.js';
import type { ExecutionService, ItemSuccess } from '../../core/execution-service.js';
import { NDJSON_TYPE, ndjsonTransform } from '../codecs/ndjson.js';
import { accepts } from '../content-type.js';
import { errorResponses } from '../schemas.js';

type LineProcessor = (body: unknown) => ItemSuccess;

/**
 * Registers one NDJSON route over a single-request processor (encrypt, decrypt, rewrap): one response
 * line per request line; every line's outcome goes to the call's audit summary (one event per stream).
 */
export function ndjsonRoute(
  app: FastifyInstance,
  path: string,
  execution: ExecutionService,
  process: LineProcessor,
  maxLineBytes: number,
): void {
  const tooLong = JSON.stringify(errors.tooLarge(`line exceeds ${maxLineBytes} bytes`).body());
  const notUtf8 = JSON.stringify(errors.decode('line is not valid UTF-8').body());

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
      const line = (text: string): string => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          summary?.failItem('DECODE');
          return JSON.stringify(errors.decode('line is not valid JSON').body());
        }
        try {
          const result = process(body);
          summary?.add(result, body);
          return JSON.stringify({ success: true, data: result.data, policyCode: result.policyCode });
        } catch (error) {
          if (error instanceof EngineError) {
            summary?.failItem(error.code);
            return JSON.stringify(error.body());
          }
          throw error;
        }
      };
      const out = pipeline(
        request.body as Readable,
        ndjsonTransform(
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
        ),
        (error) => {
          if (error) request.log.debug({ err: error }, 'stream ended early');
        },
      );
      return reply.type(NDJSON_TYPE).send(out);
    },
  );
}

export const streamRoutes: FastifyPluginAsync<{ execution: ExecutionService; maxLineBytes: number }> = async (
  app,
  { execution, maxLineBytes },
) => {
  ndjsonRoute(app, '/api/encrypt/stream', execution, execution.encryptOne.bind(execution), maxLineBytes);
  ndjsonRoute(app, '/api/decrypt/stream', execution, execution.decryptOne.bind(execution), maxLineBytes);
};
