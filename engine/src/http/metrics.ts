// Prometheus metrics (prom-client, one registry per engine, never the global one): request counts and
// latencies per route, per key version usage counters with the near-limit flag, cache size, engine
// status and store health. Collected on scrape from the live objects, so they cannot drift.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { RuntimeCache } from '../core/runtime-cache.js';
import type { EngineStatus } from '../hub/protocol.js';
import { usageReport } from '../store/usage-report.js';

export interface MetricsSources {
  readonly cache: RuntimeCache;
  readonly status?: () => EngineStatus;
  readonly storeAvailable?: () => boolean;
  readonly engineVersion: string;
  /** The crypto worker pool, when there is one (SVC_WORKERS > 1). */
  readonly workers?: { states(): Record<string, number>; readonly replaced: number; readonly slicesRun: number };
}

export interface EngineMetrics {
  readonly registry: Registry;
  readonly requests: Counter<'method' | 'route' | 'status'>;
  readonly latency: Histogram<'method' | 'route'>;
  /** Connections closed at accept because the listener had SVC_MAX_CONNECTIONS open (transport-guards.ts). */
  readonly connectionsRefused: Counter;
}

export function createMetrics(sources: MetricsSources): EngineMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'svc_' });
  const requests = new Counter({
    name: 'svc_http_requests_total',
    help: 'HTTP requests by method, route template and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'svc_http_request_duration_seconds',
    help: 'HTTP request latency by method and route template',
    labelNames: ['method', 'route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  });
  const connectionsRefused = new Counter({
    name: 'svc_http_connections_refused_total',
    help: 'Connections closed at accept because SVC_MAX_CONNECTIONS were open',
    registers: [registry],
  });
  const usage = (name: string, help: string, field: 'encryptions' | 'decryptions') =>
    new Counter({
      name,
      help,
      labelNames: ['alias', 'version'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const k of usageReport(sources.cache)) this.inc({ alias: k.alias, version: String(k.version) }, k[field]);
      },
    });
  usage('svc_key_encryptions_total', 'Encryptions per key version (persisted across restarts)', 'encryptions');
  usage('svc_key_decryptions_total', 'Decryptions per key version (persisted across restarts)', 'decryptions');
  new Gauge({
    name: 'svc_key_near_limit',
    help: '1 when an AES-GCM key version has reached 2^31 encryptions (limit 2^32): rotate it',
    labelNames: ['alias', 'version'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const k of usageReport(sources.cache)) this.set({ alias: k.alias, version: String(k.version) }, k.nearLimit ? 1 : 0);
    },
  });
  const { workers } = sources;
  if (workers) {
    new Gauge({
      name: 'svc_workers',
      help: 'Crypto worker threads by state (starting: spawned or installing a snapshot)',
      labelNames: ['state'] as const,
      registers: [registry],
      collect() {
        for (const [state, count] of Object.entries(workers.states())) this.set({ state }, count);
      },
    });
    new Counter({
      name: 'svc_workers_replaced_total',
      help: 'Crypto worker threads that ended unexpectedly and were replaced',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(workers.replaced);
      },
    });
    new Counter({
      name: 'svc_worker_slices_total',
      help: 'Batch slices run on crypto worker threads',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(workers.slicesRun);
      },
    });
  }
  new Gauge({
    name: 'svc_cache_entries',
    help: 'Entries in the local runtime cache',
    labelNames: ['kind'] as const,
    registers: [registry],
    collect() {
      this.set({ kind: 'policy' }, sources.cache.current.policyCount);
      this.set({ kind: 'key' }, sources.cache.current.keyCount);
    },
  });
  new Gauge({
    name: 'svc_engine_info',
    help: 'Engine version and runtime status (value 1 on the current status)',
    labelNames: ['version', 'status'] as const,
    registers: [registry],
    collect() {
      this.reset();
      this.set({ version: sources.engineVersion, status: sources.status?.() ?? 'UNREGISTERED' }, 1);
    },
  });
  if (sources.storeAvailable) {
    const available = sources.storeAvailable;
    new Gauge({
      name: 'svc_store_available',
      help: '1 while the snapshot store accepts writes',
      registers: [registry],
      collect() {
        this.set(available() ? 1 : 0);
      },
    });
  }
  return { registry, requests, latency, connectionsRefused };
}

/** Counts and times every request of the app it is registered on (root level, hence fastify-plugin). */
export const requestMetrics = fp<{ metrics: EngineMetrics }>(
  async (app: FastifyInstance, { metrics }) => {
    // Labelled children are looked up once per (method, route, status): resolving label objects on
    // every request cost more than the encryption itself.
    const counters = new Map<string, { inc(): void }>();
    const timers = new Map<string, { observe(value: number): void }>();
    app.addHook('onResponse', (request, reply, done) => {
      // The route template, not the URL: unknown paths share one label so scanners cannot blow up cardinality.
      const route = request.routeOptions.url ?? 'unmatched';
      const timerKey = `${request.method} ${route}`;
      const counterKey = `${timerKey} ${reply.statusCode}`;
      let counter = counters.get(counterKey);
      if (!counter) counters.set(counterKey, (counter = metrics.requests.labels(request.method, route, String(reply.statusCode))));
      let timer = timers.get(timerKey);
      if (!timer) timers.set(timerKey, (timer = metrics.latency.labels(request.method, route)));
      counter.inc();
      timer.observe(reply.elapsedTime / 1000);
      done();
    });
  },
  { name: 'svc-request-metrics' },
);

/** GET /metrics in the Prometheus text format. */
export const metricsRoute: FastifyPluginAsync<{ metrics: EngineMetrics }> = async (app, { metrics }) => {
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    const body = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(body);
  });
};
