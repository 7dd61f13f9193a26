// POST /api/encrypt/stream and /api/decrypt/stream: NDJSON in, NDJSON out, one response line per
// request line, in order, processed as it arrives. A bad line gets an error line; the stream goes on.
// Every response line has the single response body shape, so an error line always carries
// `"success": false` and `error`, whatever the error's shape as a whole response would be.
import { pipeline, type Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import { EngineError, errors } from '../../core/errors.js';
import type { ExecutionService } from '../../core/execution-service.js';
import { NDJSON_TYPE, ndjsonTransform } from '../codecs/ndjson.js';
import { accepts } from '../content-type.js';
import { errorResponses } from '../schemas.js';

/** One NDJSON error line, in the single response body shape. */
export function errorLine(error: EngineError): string {
  return JSON.stringify({ success: false, error: error.message });
}

export const streamRoutes: FastifyPluginAsync<{ execution: ExecutionService; maxLineBytes: number }> = async (
  app,
  opts,
) => {
  const { execution, maxLineBytes } = opts;
  const tooLong = errorLine(errors.tooLarge(`line exceeds ${maxLineBytes} bytes`));
  const notUtf8 = errorLine(errors.decode('line is not valid UTF-8'));

  for (const operation of ['encrypt', 'decrypt'] as const) {
    const process =
      operation === 'encrypt' ? execution.encryptOne.bind(execution) : execution.decryptOne.bind(execution);
    const line = (text: string): string => {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return errorLine(errors.decode('line is not valid JSON'));
      }
      try {
        const { data, policyCode } = process(body);
        return JSON.stringify({ success: true, data, policyCode });
      } catch (error) {
        if (error instanceof EngineError) return errorLine(error);
        throw error;
      }
    };

    app.post(
      `/api/${operation}/stream`,
      {
        onRequest: accepts(NDJSON_TYPE),
        schema: {
          description: 'NDJSON: one single request body per line in, one single response body per line out',
          response: errorResponses,
        },
      },
      (request, reply) => {
        execution.snapshot(); // answer 503 up front rather than one error line per request line
        const out = pipeline(
          request.body as Readable,
          ndjsonTransform({ line, tooLong: () => tooLong, notUtf8: () => notUtf8 }, maxLineBytes),
          (error) => {
            if (error) request.log.debug({ err: error }, 'stream ended early');
          },
        );
        return reply.type(NDJSON_TYPE).send(out);
      },
    );
  }
};
