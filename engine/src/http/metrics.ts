// Prometheus metrics (prom-client, one registry per engine, never the global one): request counts and
// latencies per route, per key version usage counters with the near-limit flag, cache size, engine
// status and store health. Collected on scrape from the live objects, so they cannot drift.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
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
  /** Request counts and latencies, kept in plain numbers per series and read by the registry on scrape. */
  readonly http: HttpRequestSeries;
  /** Connections closed at accept because the listener had SVC_MAX_CONNECTIONS open (transport-guards.ts). */
  readonly connectionsRefused: Counter;
}

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];

/** One (method, route) pair: its latency buckets (not cumulative), sum and count, and counts per status. */
interface RouteSeries {
  readonly labels: { readonly method: string; readonly route: string };
  readonly buckets: number[];
  sum: number;
  count: number;
  readonly statuses: Map<number, number>;
}

/**
 * What the request hook records per request, in plain numbers: prom-client's labelled children hash their
 * label values on every call, which cost more than the encryption on a single-value request. The registry
 * reads these on scrape: svc_http_requests_total through a Counter's collect(), and the latency histogram
 * through an object of prom-client's metric shape (getForPromString), rendered by the same registry code
 * as prom-client's own Histogram, so the exposition text is the same.
 */
export class HttpRequestSeries {
  readonly #routes = new Map<string, RouteSeries>();

  /** The series of a (method, route) pair; callers keep it per route so the lookup is rare. */
  route(method: string, route: string): RouteSeries {
    const key = `${method} ${route}`;
    let series = this.#routes.get(key);
    if (!series) {
      series = { labels: { method, route }, buckets: new Array<number>(LATENCY_BUCKETS.length).fill(0), sum: 0, count: 0, statuses: new Map() };
      this.#routes.set(key, series);
    }
    return series;
  }

  record(series: RouteSeries, status: number, seconds: number): void {
    series.statuses.set(status, (series.statuses.get(status) ?? 0) + 1);
    series.count++;
    series.sum += seconds;
    for (let i = 0; i < LATENCY_BUCKETS.length; i++) {
      if (seconds <= (LATENCY_BUCKETS[i] as number)) {
        (series.buckets[i] as number)++;
        break;
      }
    }
  }

  routes(): IterableIterator<RouteSeries> {
    return this.#routes.values();
  }
}

/** The latency histogram in prom-client's metric shape, from the series (registered with registerMetric). */
function latencyMetric(series: HttpRequestSeries) {
  const name = 'svc_http_request_duration_seconds';
  const help = 'HTTP request latency by method and route template';
  const values = () => {
    const out: { labels: Record<string, string | number>; sharedLabels: Record<string, string>; value: number; metricName: string }[] = [];
    for (const s of series.routes()) {
      const shared = { ...s.labels };
      let cumulative = 0;
      for (let i = 0; i < LATENCY_BUCKETS.length; i++) {
        cumulative += s.buckets[i] as number;
        out.push({ labels: { le: LATENCY_BUCKETS[i] as number }, sharedLabels: shared, value: cumulative, metricName: `${name}_bucket` });
      }
      out.push({ labels: { le: '+Inf' }, sharedLabels: shared, value: s.count, metricName: `${name}_bucket` });
      out.push({ labels: {}, sharedLabels: shared, value: s.sum, metricName: `${name}_sum` });
      out.push({ labels: {}, sharedLabels: shared, value: s.count, metricName: `${name}_count` });
    }
    return out;
  };
  return {
    name,
    help,
    type: 'histogram',
    aggregator: 'sum',
    getForPromString: async () => ({ name, help, type: 'histogram', values: values(), aggregator: 'sum' }),
    // The JSON form (getMetricsAsJSON), with the shared labels folded in as prom-client's Histogram does.
    get: async () => ({
      name,
      help,
      type: 'histogram',
      aggregator: 'sum',
      values: values().map(({ labels, sharedLabels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } })),
    }),
    reset: () => undefined,
  };
}

export function createMetrics(sources: MetricsSources): EngineMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'svc_' });
  const http = new HttpRequestSeries();
  new Counter({
    name: 'svc_http_requests_total',
    help: 'HTTP requests by method, route template and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const s of http.routes()) {
        for (const [status, count] of s.statuses) this.inc({ method: s.labels.method, route: s.labels.route, status: String(status) }, count);
      }
    },
  });
  registry.registerMetric(latencyMetric(http) as unknown as Parameters<Registry['registerMetric']>[0]);
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
  return { registry, http, connectionsRefused };
}

/** Counts and times every request of the app it is registered on (root level, hence fastify-plugin). */
export const requestMetrics = fp<{ metrics: EngineMetrics }>(
  async (app: FastifyInstance, { metrics }) => {
    const { http } = metrics;
    // The series of each route template is looked up once per method; unknown paths share one label so
    // scanners cannot blow up cardinality.
    const byRoute = new Map<string, Map<string, ReturnType<HttpRequestSeries['route']>>>();
    app.addHook('onResponse', (request, reply, done) => {
      const route = request.routeOptions.url ?? 'unmatched';
      let methods = byRoute.get(route);
      if (!methods) byRoute.set(route, (methods = new Map()));
      let series = methods.get(request.method);
      if (!series) methods.set(request.method, (series = http.route(request.method, route)));
      http.record(series, reply.statusCode, reply.elapsedTime / 1000);
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
