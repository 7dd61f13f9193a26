// GET /stats/test-connection?statsTargetUrl=: can this engine reach an http(s) stats target? One GET
// with a short timeout and no redirects; the answer reports status and latency, never the target's body.
import type { FastifyPluginAsync } from 'fastify';
import { errors } from '../../../core/errors.js';
import { parseHttpUrl } from '../../../core/http-url.js';
import type { OperationsDeps } from './deps.js';
import { errorResponses, TestConnection } from './schemas.js';

/**
 * The target URL, refused when it carries a user name or password: the answer echoes the URL, and
 * credentials must never be echoed (nor sent to a target only being tested for reachability).
 */
function targetOf(query: unknown): URL {
  const url = parseHttpUrl((query as Record<string, unknown> | undefined)?.statsTargetUrl, 'statsTargetUrl');
  if (url.username || url.password) throw errors.operationInvalid('statsTargetUrl must not carry credentials');
  return url;
}

export const statsTestConnectionRoute: FastifyPluginAsync<OperationsDeps> = async (app, { statsTimeoutMs }) => {
  app.get(
    '/stats/test-connection',
    { schema: { response: { 200: TestConnection, ...errorResponses } } },
    async (request) => {
      const target = targetOf(request.query);
      const started = performance.now();
      // Echoed without its query or fragment: those may carry tokens.
      const statsTargetUrl = `${target.origin}${target.pathname}`;
      try {
        const response = await fetch(target, {
          method: 'GET',
          redirect: 'manual',
          signal: AbortSignal.timeout(statsTimeoutMs),
        });
        await response.body?.cancel();
        const latencyMs = Math.round(performance.now() - started);
        return { success: true, statsTargetUrl, reachable: true, httpStatus: response.status, latencyMs, error: null };
      } catch (error) {
        const latencyMs = Math.round(performance.now() - started);
        const name = (error as Error).name;
        const cause = (error as { cause?: { code?: string } }).cause;
        const detail =
          name === 'TimeoutError' ? `no answer within ${statsTimeoutMs} ms` : (cause?.code ?? 'connection failed');
        return { success: false, statsTargetUrl, reachable: false, httpStatus: null, latencyMs, error: detail };
      }
    },
  );
};
