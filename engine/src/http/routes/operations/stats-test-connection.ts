// GET /stats/test-connection?statsTargetUrl=: can this engine reach an http(s) stats target? One GET
// with a short timeout and no redirects, to the addresses vetted by outbound-target.ts (link-local and
// metadata addresses refused unless listed). The answer is reachable or not, nothing more: no status,
// no timing, no error code, so the endpoint cannot tell a refused port from a filtered one.
import { request as httpRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import type { FastifyPluginAsync } from 'fastify';
import { errors } from '../../../core/errors.js';
import { parseHttpUrl } from '../../../core/http-url.js';
import { type ResolvedAddress, systemResolver, vetTarget } from '../../outbound-target.js';
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

/** A lookup that answers with the vetted addresses only, whatever the name would resolve to now. */
function pinnedLookup(addresses: readonly ResolvedAddress[]): LookupFunction {
  return (_hostname, options, callback) => {
    const first = addresses[0] as ResolvedAddress;
    if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [...addresses]);
    else callback(null, first.address, first.family);
  };
}

/** Whether one GET to the target gets any HTTP answer within the time limit. */
function probe(target: URL, addresses: readonly ResolvedAddress[], timeoutMs: number): Promise<boolean> {
  const options: RequestOptions = {
    method: 'GET',
    lookup: pinnedLookup(addresses),
    signal: AbortSignal.timeout(timeoutMs),
    headers: { connection: 'close' },
  };
  return new Promise((resolve) => {
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    const request = send(target, options, (response) => {
      response.destroy();
      resolve(true);
    });
    request.once('error', () => resolve(false));
    request.end();
  });
}

export const statsTestConnectionRoute: FastifyPluginAsync<OperationsDeps> = async (app, deps) => {
  const { statsTimeoutMs, statsAllowedTargets } = deps;
  const resolve = deps.statsResolver ?? systemResolver;
  app.get(
    '/stats/test-connection',
    { schema: { response: { 200: TestConnection, ...errorResponses } } },
    async (request) => {
      const target = targetOf(request.query);
      // Echoed without its query or fragment: those may carry tokens.
      const statsTargetUrl = `${target.origin}${target.pathname}`;
      let addresses: ResolvedAddress[] | undefined;
      try {
        addresses = await vetTarget(target, statsAllowedTargets, resolve);
      } catch {
        addresses = []; // the name does not resolve: not reachable, reported like any other failure
      }
      if (addresses === undefined) throw errors.operationInvalid('statsTargetUrl is not an allowed target');
      const reachable = addresses.length > 0 && (await probe(target, addresses, statsTimeoutMs));
      return reachable
        ? { success: true, statsTargetUrl, reachable: true, error: null }
        : { success: false, statsTargetUrl, reachable: false, error: 'connection failed' };
    },
  );
};
