// Health checks. /health is liveness, /actuator/health has the Spring Boot shape and is DOWN (503) until
// the cache can serve, /api/health is the contract's body with the running build's version. While the
// engine drains, the lifecycle hook answers all of them with 503.
import type { FastifyPluginAsync } from 'fastify';
import { Type } from 'typebox';
import type { ExecutionService } from '../../core/execution-service.js';

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
};
