// The operations API on its own listener (SVC_OPS_HOST/SVC_OPS_PORT, the default): absent from the application
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
    expect((await operations.app.inject({ method: 'GET', url: '/health' })).json()).toEqual({ status: 'UP' });
  });
});

describe('settings', () => {
  it('defaults: embedded store, operations on their own loopback listener, 30 s heartbeat, raw key material refused', () => {
    const config = loadConfig({}, []);
    expect(config.store).toMatchObject({ databaseUrl: undefined, engineId: 'default', allowRawKeyMaterial: false });
    expect(config.hub.heartbeatIntervalMs).toBe(30_000);
    expect(config.operationsListener).toEqual({ host: '127.0.0.1', port: 8081 });
    expect(config.registration).toEqual({ hubUrl: undefined, token: undefined, tokenFile: undefined });
    expect(config.keyDestroyGraceMs).toBe(168 * 3_600_000);
  });

  it('shares the execution listener only by explicit choice, and never on the same port by accident', () => {
    expect(loadConfig({ SVC_OPS_SHARED: 'true' }, []).operationsListener).toBeUndefined();
    expect(loadConfig({ SVC_OPS_PORT: '0', SVC_PORT: '0' }, []).operationsListener).toEqual({ host: '127.0.0.1', port: 0 });
    expect(() => loadConfig({ SVC_PORT: '9000', SVC_OPS_PORT: '9000' }, [])).toThrow(
      'SVC_OPS_PORT (9000) equals SVC_PORT: give the operations API its own port, or set SVC_OPS_SHARED=true to share the execution listener',
    );
    expect(() => loadConfig({ SVC_PORT: '8081' }, [])).toThrow(/SVC_OPS_PORT \(8081\) equals SVC_PORT/);
    expect(() => loadConfig({ SVC_OPS_SHARED: 'true', SVC_OPS_PORT: '9090' }, [])).toThrow(/unset SVC_OPS_HOST and SVC_OPS_PORT/);
  });

  it('reads the hub pin and the registration token, refusing a short token without echoing it', () => {
    const config = loadConfig({ SVC_HUB_URL: 'https://hub.example:9100/', SVC_REGISTRATION_TOKEN: 'x'.repeat(20) }, []);
    expect(config.registration).toMatchObject({ hubUrl: 'https://hub.example:9100', token: 'x'.repeat(20) });
    expect(() => loadConfig({ SVC_REGISTRATION_TOKEN: 'short-secret' }, [])).toThrow(
      /^SVC_REGISTRATION_TOKEN must be at least 16 characters$/,
    );
    expect(() => loadConfig({ SVC_HUB_URL: 'https://u:p@hub' }, [])).toThrow(/SVC_HUB_URL must be an absolute http/);
    expect(loadConfig({ SVC_KEY_DESTROY_GRACE_HOURS: '0' }, []).keyDestroyGraceMs).toBe(0);
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
    expect(() => loadConfig({ SVC_HUB_HEARTBEAT_INTERVAL_MS: '0' }, [])).toThrow(/SVC_HUB_HEARTBEAT_INTERVAL_MS/);
    expect(() => loadConfig({ SVC_ALLOW_RAW_KEY_MATERIAL: 'yes' }, [])).toThrow(/SVC_ALLOW_RAW_KEY_MATERIAL/);
  });
});
