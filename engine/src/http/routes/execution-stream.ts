// POST /api/encrypt/stream and /api/decrypt/stream: NDJSON in, NDJSON out, one response line per
// request line, in order, processed as it arrives. A bad line gets an error line; the stream goes on.
import { pipeline, type Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import { EngineError, errors } from '../../core/errors.js';
import type { ExecutionService } from '../../core/execution-service.js';
import { NDJSON_TYPE, ndjsonTransform } from '../codecs/ndjson.js';
import { accepts } from '../content-type.js';
import { errorResponses } from '../schemas.js';

export const streamRoutes: FastifyPluginAsync<{ execution: ExecutionService; maxLineBytes: number }> = async (
  app,
  opts,
) => {
  const { execution, maxLineBytes } = opts;
  const tooLong = JSON.stringify(errors.tooLarge(`line exceeds ${maxLineBytes} bytes`).body());
  const notUtf8 = JSON.stringify(errors.decode('line is not valid UTF-8').body());

  for (const operation of ['encrypt', 'decrypt'] as const) {
    const process =
      operation === 'encrypt' ? execution.encryptOne.bind(execution) : execution.decryptOne.bind(execution);
    const line = (text: string): string => {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return JSON.stringify(errors.decode('line is not valid JSON').body());
      }
      try {
        const { data, policyCode } = process(body);
        return JSON.stringify({ success: true, data, policyCode });
      } catch (error) {
        if (error instanceof EngineError) return JSON.stringify(error.body());
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
