// Health checks: /health (liveness), /actuator/health (Spring Boot shape, DOWN until the cache can
// serve), /api/health (the contract's body with the running build's version).
import type { FastifyPluginAsync } from 'fastify';
import { Type } from 'typebox';
import type { ExecutionService } from '../../core/execution-service.js';
import type { Lifecycle } from '../lifecycle.js';

export interface HealthComponent {
  readonly status: 'UP' | 'DOWN';
  readonly details?: Record<string, unknown>;
}

export interface HealthOptions {
  readonly execution: ExecutionService;
  readonly lifecycle: Lifecycle;
  readonly service: string;
  readonly version: string;
  /** Extra actuator components (store, hub, ...), each reporting its own status. */
  readonly components?: Record<string, () => HealthComponent>;
}

const Status = Type.Union([Type.Literal('UP'), Type.Literal('DOWN')]);

export const healthRoutes: FastifyPluginAsync<HealthOptions> = async (app, opts) => {
  const up = () => !opts.lifecycle.draining;

  app.get(
    '/health',
    { schema: { response: { 200: Type.Object({ status: Status }), 503: Type.Object({ status: Status }) } } },
    (_req, reply) => reply.code(up() ? 200 : 503).send({ status: up() ? 'UP' : 'DOWN' }),
  );

  app.get('/actuator/health', { schema: { response: { 200: Type.Unknown(), 503: Type.Unknown() } } }, (_req, reply) => {
    const snapshot = opts.execution.cache.current;
    const components: Record<string, HealthComponent> = {
      crypto: {
        status: snapshot.configured ? 'UP' : 'DOWN',
        details: { policyCount: snapshot.policyCount, keyCount: snapshot.keyCount },
      },
      lifecycle: { status: up() ? 'UP' : 'DOWN' },
    };
    for (const [name, check] of Object.entries(opts.components ?? {})) components[name] = check();
    const status = Object.values(components).every((c) => c.status === 'UP') ? 'UP' : 'DOWN';
    return reply.code(status === 'UP' ? 200 : 503).send({ status, components });
  });

  const ApiHealth = Type.Object({ status: Status, service: Type.String(), version: Type.String() });
  app.get('/api/health', { schema: { response: { 200: ApiHealth, 503: ApiHealth } } }, (_req, reply) =>
    reply.code(up() ? 200 : 503).send({ status: up() ? 'UP' : 'DOWN', service: opts.service, version: opts.version }),
  );
};
