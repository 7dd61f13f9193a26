// The audit trail: one event per execution and operations call on every transport, with counts, policy
// codes, key versions and outcome; never a value, a ciphertext, a key or a tenant id; the JSON-lines
// file sink; fail-closed refusing calls while no sink can be written, and serving again once it can.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { FileAuditSink, type SinkLog } from '../src/audit/file-sink.js';
import { AUDIT_TRANSPORTS, type AuditEvent, type AuditSink, AuditTrail, formatAuditEvent } from '../src/core/audit.js';
import { ExecutionService } from '../src/core/execution-service.js';
import { RuntimeCache } from '../src/core/runtime-cache.js';
import { loadConfig } from '../src/config.js';
import { buildApp, buildOperationsApp, type EngineApp } from '../src/http/app.js';
import { BINARY_FRAME_TYPE, encodeRequestFrame } from '../src/http/codecs/binary-frame.js';
import { GCM_KEY_V1, GCM_KEY_V2, key, SIV_KEY_V1, standardContent } from './support/fixtures.js';
import { TENANT } from './support/hub-fixtures.js';
import { JSON_HEADERS, TEST_LIMITS, TEST_VERSION } from './support/http.js';
import { OPS, type OperationsWorld, operationsWorld } from './support/operations-fixtures.js';

class MemorySink implements AuditSink {
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

const quiet: SinkLog = { warn() {}, error() {}, info() {} };
const CANARY = 'canary-7f3a9c-secret-value';

let engine: EngineApp | undefined;
let world: OperationsWorld | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await engine?.app.close();
  engine = undefined;
  await world?.close();
  world = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function auditedApp(sinks: AuditSink[], failClosed = false) {
  const cache = new RuntimeCache();
  cache.replace({ ...standardContent(), runtimeVersion: 'test' });
  const trail = new AuditTrail(sinks, { failClosed, fingerprintKey: Buffer.alloc(32, 1) });
  const execution = new ExecutionService(cache, TEST_LIMITS, trail);
  engine = await buildApp({ execution, limits: TEST_LIMITS, version: TEST_VERSION });
  return { app: engine.app, cache, execution, trail };
}

function post(app: EngineApp['app'], url: string, body: unknown, headers: Record<string, string> = JSON_HEADERS) {
  return app.inject({
    method: 'POST',
    url,
    headers,
    payload: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
}

function keyVersionOf(ciphertext: string): number {
  return Buffer.from(ciphertext.split(':')[2] ?? '', 'base64url').readUInt32BE(2);
}

describe('audit events of the execution API', () => {
  it('records one event per call on every transport, with counts, policies, key versions and outcome', async () => {
    const sink = new MemorySink();
    const { app, cache } = await auditedApp([sink]);
    const enc = await post(app, '/api/encrypt', { data: 'a', policyCode: 'PII_GCM' });
    const ct = enc.json().data as string;
    await post(app, '/engine/api/decrypt', { data: ct });
    await post(app, '/api/encrypt/batch', {
      items: [
        { data: 'a', policyCode: 'PII_GCM' },
        { data: 'b', policyCode: 'PII_SIV' },
        { data: 'c', policyCode: 'NOPE' },
      ],
    });
    await post(app, '/api/decrypt/batch', encodeRequestFrame('decrypt', [{ data: ct }]), {
      'content-type': BINARY_FRAME_TYPE,
    });
    await post(app, '/api/encrypt/stream', '{"data":"s","policyCode":"PII_SIV"}\nnope\n', {
      'content-type': 'application/x-ndjson',
    });
    cache.replace({
      ...standardContent(),
      keys: [
        key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1),
        key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2),
        key('test-siv', 1, 'AES-256-SIV', SIV_KEY_V1),
      ],
      runtimeVersion: 'rotated',
    });
    const rewrap = await post(app, '/api/rewrap/batch', { items: [{ data: ct }, { data: 'junk' }] });
    expect(keyVersionOf(rewrap.json().results[0].encryptedData)).toBe(2);
    await post(app, '/api/equality-terms', { data: 'x', policyCode: 'PII_SIV' });

    const events = sink.events();
    expect(events.map((e) => [e.transport, e.operation])).toEqual([
      ['http-json', 'encrypt'],
      ['http-json', 'decrypt'],
      ['http-batch', 'encrypt'],
      ['http-frame', 'decrypt'],
      ['http-stream', 'encrypt'],
      ['http-batch', 'rewrap'],
      ['http-json', 'equality-terms'],
    ]);
    const [single, decrypt, batch, frame, stream, rewrapped, terms] = events as [
      AuditEvent,
      AuditEvent,
      AuditEvent,
      AuditEvent,
      AuditEvent,
      AuditEvent,
      AuditEvent,
    ];
    expect(single).toMatchObject({
      type: 'audit',
      version: 1,
      caller: { address: '127.0.0.1' },
      policyCodes: ['PII_GCM'],
      keyVersions: [1],
      items: { total: 1, succeeded: 1, failed: 0 },
      outcome: { result: 'ok', status: 200 },
    });
    expect(single.requestId).toBe(enc.headers['x-request-id']);
    expect(Date.parse(single.time)).not.toBeNaN();
    expect(decrypt).toMatchObject({ policyCodes: ['PII_GCM'], keyVersions: [1], items: { total: 1, succeeded: 1 } });
    expect(batch).toMatchObject({
      policyCodes: ['PII_GCM', 'PII_SIV', 'NOPE'],
      keyVersions: [1],
      items: { total: 3, succeeded: 2, failed: 1 },
      itemErrors: { POLICY_NOT_FOUND: 1 },
      outcome: { result: 'partial', status: 200 },
    });
    expect(frame).toMatchObject({ keyVersions: [1], items: { total: 1, succeeded: 1, failed: 0 } });
    expect(stream).toMatchObject({ items: { total: 2, succeeded: 1, failed: 1 }, itemErrors: { DECODE: 1 } });
    expect(rewrapped).toMatchObject({
      policyCodes: ['PII_GCM'],
      keyVersions: [2],
      fromKeyVersions: [1],
      items: { total: 2, succeeded: 1, failed: 1 },
      itemErrors: { MALFORMED_CIPHERTEXT: 1 },
    });
    expect(terms).toMatchObject({ policyCodes: ['PII_SIV'], keyVersions: [1], items: { total: 1, succeeded: 1 } });
  });

  it('records refused calls with their status and catalogue code', async () => {
    const sink = new MemorySink();
    const { app } = await auditedApp([sink]);
    await post(app, '/api/encrypt', { data: 'a', policyCode: 'NOPE' });
    await post(app, '/api/decrypt', 'x', { 'content-type': 'text/plain' });
    await post(app, '/api/rewrap', { data: 'hub:PII_GCM:AAAAAAAAAAAA', policyCode: 'PII_GCM' });
    await post(app, '/api/encrypt/batch', '{"items":');
    await app.inject({ url: '/api/health' });
    expect(sink.events().map((e) => [e.operation, e.outcome, e.items, e.policyCodes])).toEqual([
      ['encrypt', { result: 'error', status: 404, error: 'POLICY_NOT_FOUND' }, { total: 1, succeeded: 0, failed: 1 }, ['NOPE']],
      ['decrypt', { result: 'error', status: 415, error: 'UNSUPPORTED_MEDIA_TYPE' }, { total: 1, succeeded: 0, failed: 1 }, []],
      ['rewrap', { result: 'error', status: 400, error: 'REWRAP_DATA_ONLY' }, { total: 1, succeeded: 0, failed: 1 }, ['PII_GCM']],
      ['encrypt', { result: 'error', status: 400, error: 'DECODE' }, { total: 0, succeeded: 0, failed: 0 }, []],
    ]);
  });

  it('never writes a plaintext, a ciphertext, a key or a tenant id into an event', async () => {
    const sink = new MemorySink();
    const { app } = await auditedApp([sink]);
    const enc = await post(app, '/api/encrypt', { data: CANARY, policyCode: 'PII_SIV' });
    const ct = enc.json().data as string;
    const batch = await post(app, '/api/encrypt/batch', { items: [{ data: CANARY, policyCode: 'PII_GCM' }, { data: CANARY }] });
    await post(app, '/api/decrypt', { data: ct });
    await post(app, '/api/decrypt', { data: CANARY });
    await post(app, '/api/decrypt/batch', { items: [{ data: ct }, { data: CANARY }] });
    await post(app, '/api/rewrap', { data: ct });
    await post(app, '/api/rewrap/stream', `${JSON.stringify({ data: ct })}\n${JSON.stringify({ data: CANARY })}\n`, {
      'content-type': 'application/x-ndjson',
    });
    const terms = await post(app, '/api/equality-terms', { data: CANARY, policyCode: 'PII_SIV' });
    await post(app, '/api/encrypt', { data: CANARY, policyName: CANARY });
    await post(app, '/api/encrypt/batch', encodeRequestFrame('encrypt', [{ policyCode: 'PII_GCM', data: CANARY }]), {
      'content-type': BINARY_FRAME_TYPE,
    });

    const all = sink.lines.join('');
    expect(sink.lines).toHaveLength(10);
    const secrets = [
      CANARY,
      ct,
      ct.split(':')[2] as string,
      batch.json().results[0].encryptedData.split(':')[2],
      ...terms.json().terms.map((t: string) => t.split(':')[2]),
      GCM_KEY_V1,
      SIV_KEY_V1,
      Buffer.from(GCM_KEY_V1, 'hex').toString('base64'),
    ];
    for (const secret of secrets) expect(all).not.toContain(secret);
  });

  it('records a call from a transport without HTTP hooks, with the database role it passes', async () => {
    const sink = new MemorySink();
    const { app, execution } = await auditedApp([sink]);
    const ct = (await post(app, '/api/encrypt', { data: 'row', policyCode: 'PII_SIV' })).json().data as string;
    const items = [{ data: ct }, { data: 'x' }];
    const out = execution.audited(
      { transport: 'pgwire', caller: '10.0.0.7', requestId: 'conn-3/7', role: 'app_reader' },
      'rewrap',
      () => execution.rewrapMany(items),
      items,
    );
    expect(out.map((o) => o.ok)).toEqual([true, false]);
    expect(sink.events()[1]).toMatchObject({
      transport: 'pgwire',
      requestId: 'conn-3/7',
      caller: { address: '10.0.0.7', role: 'app_reader' },
      operation: 'rewrap',
      keyVersions: [1],
      fromKeyVersions: [1],
      items: { total: 2, succeeded: 1, failed: 1 },
      outcome: { result: 'partial' },
    });
    expect(() =>
      execution.audited({ transport: 'pgwire', role: 'r' }, 'rewrap', () => execution.rewrapMany(new Array(1000).fill({}))),
    ).toThrow('batch has 1000 items');
    expect(sink.events()[2]).toMatchObject({ outcome: { result: 'error', error: 'PAYLOAD_TOO_LARGE' } });
  });
});

describe('fail-closed for transports without HTTP hooks', () => {
  it('refuses the call before it runs while no sink can be written', async () => {
    const broken: AuditSink = { name: 'broken', write() {}, writable: () => false, flush: async () => {}, close: async () => {} };
    const { execution } = await auditedApp([broken], true);
    let ran = false;
    expect(() =>
      execution.audited({ transport: 'pgwire', role: 'app' }, 'rewrap', () => {
        ran = true;
        return execution.rewrapMany([]);
      }),
    ).toThrow('audit trail unavailable: requests are refused until it can be written');
    expect(ran).toBe(false);
  });
});

describe('audit events of the operations API', () => {
  it('records each call with the endpoint name and a fingerprint of the tenant id, never the id', async () => {
    const sink = new MemorySink();
    const trail = new AuditTrail([sink], { failClosed: false, fingerprintKey: Buffer.alloc(32, 2) });
    world = await operationsWorld({ audit: trail });
    const ok = await world.engine.app.inject({ url: `${OPS}/runtime/info`, headers: { 'x-svc-tenant-id': TENANT } });
    expect(ok.statusCode).toBe(200);
    const denied = await world.engine.app.inject({ url: `${OPS}/cache/status`, headers: { 'x-svc-tenant-id': 'wrong' } });
    expect(denied.statusCode).toBe(401);
    const events = sink.events();
    expect(events.map((e) => [e.transport, e.operation, e.outcome.status])).toEqual([
      ['operations', 'runtime/info', 200],
      ['operations', 'cache/status', 401],
    ]);
    expect(events[0]?.caller.tenant).toMatch(/^[0-9a-f]{16}$/);
    expect(events[0]?.caller.tenant).toBe(trail.fingerprint(TENANT));
    expect(events[1]?.caller.tenant).not.toBe(events[0]?.caller.tenant);
    expect(sink.lines.join('')).not.toContain(TENANT);
  });
});

describe('audit events of the operations listener', () => {
  it('records calls on the separate operations listener too', async () => {
    const sink = new MemorySink();
    const trail = new AuditTrail([sink], { failClosed: false, fingerprintKey: Buffer.alloc(32, 3) });
    world = await operationsWorld();
    engine = await buildOperationsApp({ operations: world.deps, limits: TEST_LIMITS, audit: trail });
    const res = await engine.app.inject({ url: `${OPS}/cache/status`, headers: { 'x-svc-tenant-id': TENANT } });
    expect(res.statusCode).toBe(200);
    expect(sink.events()).toMatchObject([
      { transport: 'operations', operation: 'cache/status', caller: { tenant: trail.fingerprint(TENANT) }, outcome: { result: 'ok', status: 200 } },
    ]);
    expect(res.headers['x-request-id']).toBe(sink.events()[0]?.requestId);
  });
});

describe('the audit file and fail-closed', () => {
  function tempDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'svc-audit-test-'));
    dirs.push(dir);
    return dir;
  }

  it('writes one JSON line per event to an owner-only file, all of it by close', async () => {
    const file = join(tempDir(), 'audit.log');
    const sink = new FileAuditSink(file, { flushIntervalMs: 60_000, fsyncIntervalMs: 60_000, maxBufferedEvents: 2, retryMs: 1000 }, quiet);
    const { app, trail } = await auditedApp([sink]);
    for (let i = 0; i < 3; i++) await post(app, '/api/encrypt', { data: 'x', policyCode: 'PII_GCM' });
    // Two events filled the buffer and were written; the third waits for the next flush.
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
    await trail.close();
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    expect(lines.map((l) => JSON.parse(l).operation)).toEqual(['encrypt', 'encrypt', 'encrypt']);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it('under fail-closed refuses calls with 503 while the file cannot be written, and serves once it can', async () => {
    const dir = tempDir();
    const blocker = join(dir, 'logs');
    writeFileSync(blocker, 'a file where the audit directory should be');
    const file = join(blocker, 'audit.log');
    const sink = new FileAuditSink(file, { flushIntervalMs: 20, fsyncIntervalMs: 50, maxBufferedEvents: 100, retryMs: 10 }, quiet);
    const { app, trail } = await auditedApp([sink], true);
    const refused = await post(app, '/api/encrypt', { data: 'x', policyCode: 'PII_GCM' });
    expect(refused.statusCode).toBe(503);
    expect(refused.json()).toEqual({
      success: false,
      error: 'audit trail unavailable: requests are refused until it can be written',
    });
    expect((await post(app, '/api/rewrap/batch', { items: [] })).statusCode).toBe(503);
    // Health still answers: monitoring sees the engine, and the operator fixes the path.
    expect((await app.inject({ url: '/health' })).statusCode).toBe(200);

    rmSync(blocker);
    mkdirSync(blocker);
    let served = 0;
    for (let attempt = 0; attempt < 200 && served !== 200; attempt++) {
      served = (await post(app, '/api/encrypt', { data: 'x', policyCode: 'PII_GCM' })).statusCode;
      if (served !== 200) await new Promise((r) => setTimeout(r, 20));
    }
    expect(served).toBe(200);
    await trail.close();
    expect(JSON.parse(readFileSync(file, 'utf8').trim().split('\n')[0] as string)).toMatchObject({
      operation: 'encrypt',
      outcome: { status: 200 },
    });
  });

  it('without fail-closed keeps serving while the file cannot be written', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'logs'), '');
    const sink = new FileAuditSink(join(dir, 'logs', 'audit.log'), { flushIntervalMs: 20, fsyncIntervalMs: 50, maxBufferedEvents: 100, retryMs: 10 }, quiet);
    const { app, trail } = await auditedApp([sink], false);
    expect((await post(app, '/api/encrypt', { data: 'x', policyCode: 'PII_GCM' })).statusCode).toBe(200);
    await trail.close();
  });
});

describe('audit settings', () => {
  it('audits to <data dir>/audit.log by default, turns off only when told, and refuses fail-closed without a sink', () => {
    const defaults = loadConfig({ SVC_DATA_DIR: '/srv/engine' }, []);
    expect(defaults.audit).toEqual({
      file: '/srv/engine/audit.log',
      stdout: false,
      failClosed: false,
      flushIntervalMs: 200,
      fsyncIntervalMs: 1000,
    });
    expect(loadConfig({ SVC_AUDIT_FILE: 'off', SVC_AUDIT_STDOUT: 'true' }, []).audit).toMatchObject({
      file: undefined,
      stdout: true,
    });
    expect(() => loadConfig({ SVC_AUDIT_FILE: 'off', SVC_AUDIT_FAIL_CLOSED: 'true' }, [])).toThrow(
      'SVC_AUDIT_FAIL_CLOSED=true needs an audit sink (SVC_AUDIT_FILE or SVC_AUDIT_STDOUT)',
    );
    expect(() => loadConfig({ SVC_AUDIT_STDOUT: 'yes' }, [])).toThrow(/SVC_AUDIT_STDOUT/);
    expect(() => loadConfig({ SVC_AUDIT_FLUSH_INTERVAL_MS: '0' }, [])).toThrow(/SVC_AUDIT_FLUSH_INTERVAL_MS/);
  });
});

describe('event lines', () => {
  it('are exactly JSON.stringify of the event, field order and left-out members included', () => {
    const text = fc.string({ unit: 'grapheme', maxLength: 12 });
    const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
    const versions = fc.array(fc.integer({ min: 1, max: 2 ** 31 }), { maxLength: 4 });
    const event = fc.record({
      type: fc.constant('audit' as const),
      version: fc.constant(1 as const),
      time: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      requestId: optional(fc.uuid()),
      transport: fc.constantFrom(...AUDIT_TRANSPORTS),
      caller: fc.record({ address: optional(text), role: optional(text), tenant: optional(text) }),
      operation: text,
      policyCodes: fc.array(text, { maxLength: 4 }),
      keyVersions: versions,
      fromKeyVersions: optional(versions),
      items: fc.record({ total: fc.nat(), succeeded: fc.nat(), failed: fc.nat() }),
      itemErrors: optional(fc.dictionary(text, fc.nat(), { maxKeys: 3 })),
      outcome: fc.record(
        { result: fc.constantFrom('ok' as const, 'partial' as const, 'error' as const), status: fc.integer({ min: 100, max: 599 }), error: text },
        { requiredKeys: ['result'] },
      ),
    });
    fc.assert(fc.property(event, (e) => formatAuditEvent(e) === `${JSON.stringify(e)}\n`));
  });
});
