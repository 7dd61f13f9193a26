// Health checks. /health is liveness, /actuator/health has the Spring Boot shape and is DOWN (503) until
// the cache can serve, /api/health is the contract's body with the running build's version (UP as soon as
// the process answers, so it is a liveness signal too). /api/health/ready is readiness: 503 with the
// contract's error body until policies and keys are loaded, so orchestrators send no traffic to an engine
// that would refuse every call. While the engine drains, the lifecycle hook answers all of them with 503.
import type { FastifyPluginAsync } from 'fastify';
import { Type } from 'typebox';
import { errors } from '../../core/errors.js';
import type { ExecutionService } from '../../core/execution-service.js';
import { sendError } from '../error-handler.js';

export interface HealthComponent {
  readonly status: 'UP' | 'DOWN';
  readonly details?: Record<string, unknown>;
}

export interface HealthOptions {
  readonly execution: ExecutionService;
  readonly service: string;
  readonly version: string;
  /** Extra actuator components (store, hub, ...), each reporting its own status. */
  readonly components?: Record<string, () => HealthComponent>;
}

const Status = Type.Union([Type.Literal('UP'), Type.Literal('DOWN')]);
const Component = Type.Object({ status: Status, details: Type.Optional(Type.Record(Type.String(), Type.Unknown())) });
const ActuatorHealth = Type.Object({ status: Status, components: Type.Record(Type.String(), Component) });
const ApiHealth = Type.Object({ status: Status, service: Type.String(), version: Type.String() });
const Ready = Type.Object({ status: Type.Literal('UP'), policyCount: Type.Integer(), keyCount: Type.Integer() });
const ErrorBody = Type.Object({ error: Type.String() });

export const healthRoutes: FastifyPluginAsync<HealthOptions> = async (app, opts) => {
  app.get('/health', { schema: { response: { 200: Type.Object({ status: Status }) } } }, () => ({ status: 'UP' as const }));

  app.get('/actuator/health', { schema: { response: { 200: ActuatorHealth, 503: ActuatorHealth } } }, (_req, reply) => {
    const snapshot = opts.execution.cache.current;
    const components: Record<string, HealthComponent> = {
      crypto: {
        status: snapshot.configured ? 'UP' : 'DOWN',
        details: { policyCount: snapshot.policyCount, keyCount: snapshot.keyCount },
      },
    };
    for (const [name, check] of Object.entries(opts.components ?? {})) components[name] = check();
    const status = Object.values(components).every((c) => c.status === 'UP') ? 'UP' : 'DOWN';
    return reply.code(status === 'UP' ? 200 : 503).send({ status, components });
  });

  app.get('/api/health', { schema: { response: { 200: ApiHealth } } }, () => ({
    status: 'UP' as const,
    service: opts.service,
    version: opts.version,
  }));

  app.get('/api/health/ready', { schema: { response: { 200: Ready, 503: ErrorBody } } }, (_req, reply) => {
    const snapshot = opts.execution.cache.current;
    if (!snapshot.configured) return sendError(reply, errors.notConfigured());
    return { status: 'UP' as const, policyCount: snapshot.policyCount, keyCount: snapshot.keyCount };
  });
};
