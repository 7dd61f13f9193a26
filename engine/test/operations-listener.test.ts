// The operations API on its own listener (SVC_OPS_HOST/SVC_OPS_PORT): absent from the application
// app, served with /metrics by the operations app; and the settings that configure it and the store.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { ExecutionService } from '../src/core/execution-service.js';
import { buildApp, buildOperationsApp, type EngineApp } from '../src/http/app.js';
import { closeSharedDb, TENANT } from './support/hub-fixtures.js';
import { OPS, type OperationsWorld, operationsWorld } from './support/operations-fixtures.js';
import { TEST_LIMITS, TEST_VERSION } from './support/http.js';

let w: OperationsWorld | undefined;
const apps: EngineApp[] = [];

afterEach(async () => {
  for (const a of apps.splice(0)) await a.app.close();
  await w?.close();
  w = undefined;
});

afterAll(closeSharedDb);

describe('separate operations listener', () => {
  it('keeps the operations API and /metrics off the application app and serves them on its own', async () => {
    w = await operationsWorld();
    const application = await buildApp({
      execution: new ExecutionService(w.manager.cache, TEST_LIMITS),
      limits: TEST_LIMITS,
      version: TEST_VERSION,
      metrics: w.metrics,
      serveMetrics: false,
    });
    const operations = await buildOperationsApp({ operations: w.deps, metrics: w.metrics, limits: TEST_LIMITS });
    apps.push(application, operations);
    const headers = { 'x-svc-tenant-id': TENANT };
    expect((await application.app.inject({ method: 'GET', url: `${OPS}/cache/status`, headers })).statusCode).toBe(404);
    expect((await application.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(404);
    const status = await operations.app.inject({ method: 'GET', url: `${OPS}/cache/status`, headers });
    expect(status.json()).toEqual({ policyCount: 0, keyCount: 0 });
    expect((await operations.app.inject({ method: 'GET', url: '/api/health' })).statusCode).toBe(404);
    expect((await operations.app.inject({ method: 'DELETE', url: `${OPS}/cache/clear`, headers })).statusCode).toBe(405);
    expect((await operations.app.inject({ method: 'GET', url: '/metrics' })).body).toContain('svc_http_requests_total');
  });
});

describe('settings', () => {
  it('defaults: embedded store, shared listener, 30 s heartbeat, raw key material refused', () => {
    const config = loadConfig({}, []);
    expect(config.store).toMatchObject({ databaseUrl: undefined, engineId: 'default', allowRawKeyMaterial: false });
    expect(config.hub.heartbeatIntervalMs).toBe(30_000);
    expect(config.operationsListener).toBeUndefined();
  });

  it('reads the operations listener, DATABASE_URL and the hub intervals', () => {
    const config = loadConfig(
      {
        SVC_OPS_PORT: '9090',
        DATABASE_URL: 'postgres://engine:pw@db:5432/svc',
        SVC_HUB_HEARTBEAT_INTERVAL_MS: '500',
        SVC_ALLOW_RAW_KEY_MATERIAL: 'true',
      },
      [],
    );
    expect(config.operationsListener).toEqual({ host: '127.0.0.1', port: 9090 });
    expect(config.store.databaseUrl).toBe('postgres://engine:pw@db:5432/svc');
    expect(config.store.allowRawKeyMaterial).toBe(true);
    expect(config.hub.heartbeatIntervalMs).toBe(500);
  });

  it('fails fast naming the variable, never echoing a database URL', () => {
    expect(() => loadConfig({ DATABASE_URL: 'mysql://u:secret@h/db' }, [])).toThrow(
      'DATABASE_URL must be a postgres:// or postgresql:// URL',
    );
    expect(() => loadConfig({ DATABASE_URL: 'not a url with secret' }, [])).toThrow(
      /^DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL$/,
    );
    expect(() => loadConfig({ SVC_OPS_HOST: '10.0.0.1' }, [])).toThrow('SVC_OPS_HOST needs SVC_OPS_PORT');
    expect(() => loadConfig({ SVC_HUB_HEARTBEAT_INTERVAL_MS: '0' }, [])).toThrow(/SVC_HUB_HEARTBEAT_INTERVAL_MS/);
    expect(() => loadConfig({ SVC_ALLOW_RAW_KEY_MATERIAL: 'yes' }, [])).toThrow(/SVC_ALLOW_RAW_KEY_MATERIAL/);
  });
});
