// The operations API (/engine/api/v1): identity registration outside the tenant scope, everything
// else inside an encapsulated scope whose onRequest hook checks X-SVC-Tenant-Id. One route plugin
// per file. Wrong methods on these paths get 405 from the app's method guard.
import type { FastifyPluginAsync } from 'fastify';
import { type JsonBodyRules, parseJsonBody } from '../../json-body.js';
import { cacheClearRoute } from './cache-clear.js';
import { cacheKeySyncRoute } from './cache-key-sync.js';
import { cachePolicySyncRoute } from './cache-policy-sync.js';
import { cacheStatusRoute } from './cache-status.js';
import { cacheSyncCheckRoute } from './cache-sync-check.js';
import type { OperationsDeps } from './deps.js';
import { keysLifecycleRoute } from './keys-lifecycle.js';
import { runtimeHeartbeatRoute } from './runtime-heartbeat.js';
import { runtimeHeldBackRoute } from './runtime-held-back.js';
import { runtimeIdentityRoute } from './runtime-identity.js';
import { runtimeInfoRoute } from './runtime-info.js';
import { statsTestConnectionRoute } from './stats-test-connection.js';
import { tenantGuard } from './tenant-guard.js';

export type { OperationsDeps } from './deps.js';

export const OPERATIONS_PREFIX = '/engine/api/v1';

/** Sync and identity bodies are four levels deep at most; the limit is the execution API's default depth limit. */
const OPERATIONS_JSON: JsonBodyRules = {
  maxDepth: 32,
  maxValues: Number.POSITIVE_INFINITY,
  strictUtf8: false,
  secure: true,
};

const operationsApi: FastifyPluginAsync<OperationsDeps> = async (app, deps) => {
  // Bodies are parsed by the sync and identity parsers, which name the offending entry.
  app.setValidatorCompiler(() => () => true);
  // Hubs often POST heartbeat and clear with a JSON content type and no body: treat that as no body.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    const bytes = body as Buffer;
    if (bytes.length === 0) return done(null, undefined);
    // Nesting is refused before parsing, as on the execution API: 32 MiB of nested arrays sent to the
    // identity route, open to anyone who reaches the listener, held the loop for seconds. Values are
    // not counted here: a large sync legitimately holds millions, and is parsed in slices. Otherwise
    // the rules of Fastify's default parser, which these routes used (lenient UTF-8, secure-json-parse).
    parseJsonBody(bytes, OPERATIONS_JSON, done);
  });
  await app.register(runtimeIdentityRoute, deps);
  await app.register(async (tenantScope) => {
    tenantScope.addHook('onRequest', tenantGuard(deps.agent));
    await tenantScope.register(runtimeInfoRoute, deps);
    await tenantScope.register(runtimeHeartbeatRoute, deps);
    await tenantScope.register(cacheStatusRoute, deps);
    await tenantScope.register(cacheClearRoute, deps);
    await tenantScope.register(cachePolicySyncRoute, deps);
    await tenantScope.register(cacheKeySyncRoute, deps);
    await tenantScope.register(statsTestConnectionRoute, deps);
    await tenantScope.register(cacheSyncCheckRoute, deps);
    await tenantScope.register(keysLifecycleRoute, deps);
    await tenantScope.register(runtimeHeldBackRoute, deps);
  });
};

export const operationsRoutes: FastifyPluginAsync<OperationsDeps> = async (app, deps) => {
  // The dependencies are handed over in a closure: options given to register() carry the prefix on
  // to every nested registration, which would repeat it.
  await app.register((scope) => operationsApi(scope, deps), { prefix: OPERATIONS_PREFIX });
};
