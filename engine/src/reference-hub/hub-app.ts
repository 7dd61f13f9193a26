// The reference hub's HTTP surface (docs/hub-protocol.md). Engine-facing: heartbeat and manifest,
// authenticated by the tenant header. Admin: tenants, policies, keys, rotation, and pushing
// registrations and syncs to engines; guarded by a bearer token when one is configured.
import { createHash, timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { type HeartbeatRequest, type HeartbeatResponse, HUB_PATHS, TENANT_HEADER } from '../hub/protocol.js';
import { pushRuntime, registerEngine } from './engine-push.js';
import { HubError, type HubState, type Tenant } from './hub-state.js';

export interface HubAppOptions {
  readonly state: HubState;
  /** The URL engines are told to call (registration); defaults to the request's own host. */
  readonly publicUrl?: string;
  /** When set, admin calls need `Authorization: Bearer <token>`. */
  readonly adminToken?: string;
  readonly logger?: boolean | { level: string };
}

function digestEquals(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

function bodyOf(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
}

function str(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new HubError(400, `${name} is required`);
  return value;
}

export function buildHubApp(options: HubAppOptions): FastifyInstance {
  const { state } = options;
  const app = Fastify({ logger: options.logger ?? false });

  app.setErrorHandler((error, _request, reply) => {
    if (error instanceof HubError) return reply.code(error.status).send({ error: error.message });
    const status = (error as { statusCode?: number }).statusCode ?? 500;
    return reply.code(status).send({ error: status === 500 ? 'internal error' : (error as Error).message });
  });

  const engineTenant = (request: FastifyRequest): Tenant => {
    const header = request.headers[TENANT_HEADER];
    const tenant = typeof header === 'string' ? state.tenants.get(header) : undefined;
    if (!tenant) throw new HubError(401, 'unauthorized');
    return tenant;
  };

  app.get(HUB_PATHS.health, async () => ({ status: 'UP', tenants: state.tenants.size }));

  app.post(HUB_PATHS.heartbeat, async (request): Promise<HeartbeatResponse> => {
    const tenant = engineTenant(request);
    const beat = bodyOf(request) as Partial<HeartbeatRequest>;
    tenant.lastHeartbeat = {
      engineVersion: String(beat.engineVersion ?? ''),
      runtimeVersion: String(beat.runtimeVersion ?? ''),
      status: String(beat.status ?? ''),
      at: new Date().toISOString(),
      cryptoMetrics: beat.cryptoMetrics ?? { keys: [], totalEncryptions: 0, totalDecryptions: 0, nearLimit: false },
    };
    const runtimeVersion = state.runtimeVersion(tenant);
    const runtimeChanged = beat.runtimeVersion !== runtimeVersion;
    return {
      runtimeVersion,
      runtimeChanged,
      ...(runtimeChanged ? { snapshot: state.payload(tenant) } : {}),
      serverTime: new Date().toISOString(),
    };
  });

  app.get(HUB_PATHS.manifest, async (request) => state.manifest(engineTenant(request)));

  app.register(
    async (admin) => {
      admin.addHook('onRequest', async (request, reply) => {
        if (!options.adminToken) return;
        const presented = request.headers.authorization ?? '';
        if (!digestEquals(presented, `Bearer ${options.adminToken}`))
          return reply.code(401).send({ error: 'unauthorized' });
      });

      admin.put<{ Params: { tenantId: string } }>('/tenants/:tenantId', async (request) => {
        const tenant = state.putTenant(request.params.tenantId, str(bodyOf(request).masterKey, 'masterKey'));
        return { tenantId: tenant.tenantId, runtimeVersion: state.runtimeVersion(tenant) };
      });

      admin.get<{ Params: { tenantId: string } }>('/tenants/:tenantId', async (request) => {
        const tenant = state.tenant(request.params.tenantId);
        return { ...state.manifest(tenant), lastHeartbeat: tenant.lastHeartbeat };
      });

      admin.put<{ Params: { tenantId: string; policyCode: string } }>(
        '/tenants/:tenantId/policies/:policyCode',
        async (request) => {
          const policy = state.putPolicy(request.params.tenantId, {
            ...bodyOf(request),
            policyCode: request.params.policyCode,
          });
          return { policy, runtimeVersion: state.runtimeVersion(state.tenant(request.params.tenantId)) };
        },
      );

      admin.post<{ Params: { tenantId: string } }>('/tenants/:tenantId/keys', async (request) => {
        const key = state.addKey(request.params.tenantId, bodyOf(request));
        const tenant = state.tenant(request.params.tenantId);
        return {
          alias: key.alias,
          version: key.version,
          algorithm: key.algorithm,
          runtimeVersion: state.runtimeVersion(tenant),
        };
      });

      admin.post<{ Params: { tenantId: string; alias: string } }>(
        '/tenants/:tenantId/keys/:alias/rotate',
        async (request) => {
          const key = state.rotateKey(request.params.tenantId, request.params.alias);
          const tenant = state.tenant(request.params.tenantId);
          return { alias: key.alias, version: key.version, runtimeVersion: state.runtimeVersion(tenant) };
        },
      );

      admin.post<{ Params: { tenantId: string } }>('/tenants/:tenantId/register', async (request) => {
        const tenant = state.tenant(request.params.tenantId);
        const body = bodyOf(request);
        const hubUrl = options.publicUrl ?? `${request.protocol}://${request.host}`;
        const current = typeof body.currentTenantId === 'string' ? body.currentTenantId : undefined;
        // The engine's one-time registration token (SVC_REGISTRATION_TOKEN), when it requires one.
        const token = typeof body.registrationToken === 'string' ? body.registrationToken : undefined;
        await registerEngine(str(body.engineUrl, 'engineUrl'), hubUrl, tenant.tenantId, current, token);
        return { success: true, hubUrl };
      });

      admin.post<{ Params: { tenantId: string } }>('/tenants/:tenantId/push', async (request) => {
        const tenant = state.tenant(request.params.tenantId);
        const body = bodyOf(request);
        const mode = body.mode === 'incremental' ? 'incremental' : 'full';
        return { success: true, ...(await pushRuntime(str(body.engineUrl, 'engineUrl'), state, tenant, mode)) };
      });
    },
    { prefix: '/hub/admin' },
  );

  return app;
}
