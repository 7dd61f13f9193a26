// A wire endpoint over a test execution service on a free loopback port, and a `pg` client for it.
import pg from 'pg';
import type { PgWireConfig } from '../../src/config.js';
import type { AuditEvent, AuditSink } from '../../src/core/audit.js';
import { AuditTrail } from '../../src/core/audit.js';
import { type ExecutionLimits, ExecutionService } from '../../src/core/execution-service.js';
import { RuntimeCache } from '../../src/core/runtime-cache.js';
import type { ItemsRunner } from '../../src/workers/protocol.js';
import { type PgWireListener, startPgWire } from '../../src/pgwire/listener.js';
import { DEFAULT_LIMITS, standardContent } from './fixtures.js';

export const PG_USER = 'svc';
export const PG_PASSWORD = 'test-password-1';
export const TEST_VERSION = '9.9.9-test';

export class MemorySink implements AuditSink {
  readonly name = 'memory';
  readonly lines: string[] = [];
  write(line: string): void {
    this.lines.push(line);
  }
  writable(): boolean {
    return true;
  }
  async flush(): Promise<void> {}
  async close(): Promise<void> {}
  events(): AuditEvent[] {
    return this.lines.map((l) => JSON.parse(l) as AuditEvent);
  }
}

export interface WireWorld {
  readonly listener: PgWireListener;
  readonly execution: ExecutionService;
  readonly cache: RuntimeCache;
  readonly audit: MemorySink;
  readonly logs: string[];
  client(overrides?: Partial<pg.ClientConfig>): Promise<pg.Client>;
  close(): Promise<void>;
}

export async function wireWorld(
  options: {
    config?: Partial<PgWireConfig>;
    limits?: ExecutionLimits;
    bodyLimitBytes?: number;
    configured?: boolean;
    /** Runs *_many commands (a stand-in for the worker pool), given the world's execution service. */
    batches?: (execution: ExecutionService) => ItemsRunner;
  } = {},
): Promise<WireWorld> {
  const cache = new RuntimeCache();
  if (options.configured !== false) cache.replace({ ...standardContent(), runtimeVersion: 'test' });
  const audit = new MemorySink();
  const trail = new AuditTrail([audit], { failClosed: false, fingerprintKey: Buffer.alloc(32, 1) });
  const execution = new ExecutionService(cache, options.limits ?? DEFAULT_LIMITS, trail);
  const logs: string[] = [];
  const record = (level: string) => (obj: unknown, msg?: string) => {
    logs.push(`${level} ${JSON.stringify(obj)} ${msg ?? ''}`);
  };
  const listener = await startPgWire({
    execution,
    batches: options.batches?.(execution),
    config: {
      host: '127.0.0.1',
      port: 0,
      user: PG_USER,
      password: PG_PASSWORD,
      maxConnections: 16,
      idleTimeoutMs: 60_000,
      ...options.config,
    },
    limits: { bodyLimitBytes: options.bodyLimitBytes ?? 4 * 1024 * 1024 },
    version: TEST_VERSION,
    service: 'svc-engine',
    log: { info: record('info'), warn: record('warn'), error: record('error') } as never,
  });
  const clients: pg.Client[] = [];
  return {
    listener,
    execution,
    cache,
    audit,
    logs,
    async client(overrides = {}) {
      const client = new pg.Client({
        host: '127.0.0.1',
        port: listener.port,
        user: PG_USER,
        password: PG_PASSWORD,
        database: 'svc',
        ...overrides,
      });
      // A connection the endpoint closes must not crash the test process.
      client.on('error', () => {});
      clients.push(client);
      await client.connect();
      return client;
    },
    async close() {
      await Promise.all(clients.map((c) => c.end().catch(() => {})));
      await listener.close(100);
    },
  };
}

/** Standard base64 of a text's UTF-8 bytes, `-` for the empty string (docs/pgwire.md). */
export function b64(value: string): string {
  return value === '' ? '-' : Buffer.from(value, 'utf8').toString('base64');
}
