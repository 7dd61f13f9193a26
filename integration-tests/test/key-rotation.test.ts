// Key rotation end to end, with real processes and a real PostgreSQL: the reference hub rotates both
// keys (version 2), old ciphertexts still decrypt, rewrap moves them to version 2 over JSON, the binary
// frame and NDJSON, equality terms find rows of both versions through a btree index, and the engine's
// audit file holds one line per call (never a value or the tenant id). Then fail-closed auditing.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { BINARY_FRAME_TYPE, decodeResponseFrame, encodeRequestFrame } from '../../engine/src/http/codecs/binary-frame.js';
import { engineClient, eventually, keyVersionOf } from '../src/engine-client.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { type SupervisedEngine, superviseEngine } from '../src/engine-supervisor.js';
import { type RunningHub, startHub } from '../src/hub-process.js';
import { createDatabase, dropDatabase, withClient } from '../src/postgres-harness.js';

const TENANT = 'tenant-rotation-7c1e';
const MASTER_KEY = randomBytes(32).toString('base64');
const CANARY = 'canary-rotation-93b1@example.com';
const adminUrl = inject('databaseUrl');
const DB = 'svc_rotation_it';

let hub: RunningHub;
let engine: SupervisedEngine;
let client: ReturnType<typeof engineClient>;
let dbUrl: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tests assert on whatever the engine answered.
async function post(path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${engine.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, body: await res.json() };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- audit events as written.
async function auditEvents(): Promise<any[]> {
  const text = await readFile(join(engine.dataDir, 'audit.log'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));
}

beforeAll(async () => {
  hub = await startHub();
  await hub.admin('PUT', `/tenants/${TENANT}`, { masterKey: MASTER_KEY });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-gcm', algorithm: 'AES-256-GCM' });
  await hub.admin('POST', `/tenants/${TENANT}/keys`, { alias: 'pii-siv', algorithm: 'AES-256-SIV' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_EMAIL`, { algorithm: 'AES-256-GCM', keyAlias: 'pii-gcm' });
  await hub.admin('PUT', `/tenants/${TENANT}/policies/PII_SSN`, { algorithm: 'AES-256-SIV', keyAlias: 'pii-siv' });
  // The audit file is on by default, in the data directory; flushed often so the test reads it soon.
  engine = await superviseEngine({ SVC_MASTER_KEY: MASTER_KEY, SVC_AUDIT_FLUSH_INTERVAL_MS: '50' });
  client = engineClient(engine.url, TENANT, engine.opsUrl);
  await hub.admin('POST', `/tenants/${TENANT}/register`, { engineUrl: engine.opsUrl });
  await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'full' });
  dbUrl = await createDatabase(adminUrl, DB);
});

afterAll(async () => {
  await engine?.dispose();
  await hub?.dispose();
  await dropDatabase(adminUrl, DB).catch(() => undefined);
});

describe('a key rotation from the hub', () => {
  it('keeps old ciphertexts readable, rewraps them to version 2, finds equal values of both versions, and audits each call', async () => {
    const oldEmail = await client.encrypt(CANARY, 'PII_EMAIL');
    const oldSsns = await Promise.all(['123-45-6789', '987-65-4321'].map((v) => client.encrypt(v, 'PII_SSN')));
    expect([oldEmail, ...oldSsns].map(keyVersionOf)).toEqual([1, 1, 1]);

    await hub.admin('POST', `/tenants/${TENANT}/keys/pii-gcm/rotate`);
    await hub.admin('POST', `/tenants/${TENANT}/keys/pii-siv/rotate`);
    await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'incremental' });

    const newSsn = await client.encrypt('123-45-6789', 'PII_SSN');
    expect(keyVersionOf(newSsn)).toBe(2);
    expect(await client.decrypt(oldEmail)).toBe(CANARY);
    expect(await client.decrypt(oldSsns[0] as string)).toBe('123-45-6789');

    // Equality terms: one per version, newest first; a column holding both versions is found through its index.
    const terms = await post('/api/equality-terms', { data: '123-45-6789', policyCode: 'PII_SSN' });
    expect(terms.status).toBe(200);
    expect(terms.body).toEqual({ success: true, terms: [newSsn, oldSsns[0]], policyCode: 'PII_SSN' });
    const found = await withClient(dbUrl, async (c) => {
      await c.query('CREATE TABLE people (id int PRIMARY KEY, ssn text NOT NULL)');
      await c.query('CREATE INDEX people_ssn ON people (ssn)');
      await c.query('INSERT INTO people VALUES (1, $1), (2, $2), (3, $3)', [oldSsns[0], oldSsns[1], newSsn]);
      await c.query('ANALYZE people');
      await c.query('SET enable_seqscan = off');
      const plan = await c.query('EXPLAIN (COSTS OFF) SELECT id FROM people WHERE ssn = ANY($1::text[])', [terms.body.terms]);
      const rows = await c.query('SELECT id FROM people WHERE ssn = ANY($1::text[]) ORDER BY id', [terms.body.terms]);
      return { plan: plan.rows.map((r) => r['QUERY PLAN'] as string).join('\n'), ids: rows.rows.map((r) => r.id as number) };
    });
    expect(found.ids).toEqual([1, 3]);
    expect(found.plan).toMatch(/Index (Only )?Scan using people_ssn on people|Bitmap Index Scan on people_ssn/);

    // Rewrap: single JSON, JSON batch, binary frame, NDJSON stream.
    const single = await post('/api/rewrap', { data: oldEmail });
    expect(single.status).toBe(200);
    expect(keyVersionOf(single.body.data)).toBe(2);
    expect(await client.decrypt(single.body.data)).toBe(CANARY);
    const again = await post('/engine/api/rewrap', { data: single.body.data });
    expect(again.body.data).toBe(single.body.data);

    const batch = await post('/api/rewrap/batch', { items: oldSsns.map((data) => ({ data })) });
    expect(batch.body).toMatchObject({ success: true, totalSuccess: 2, totalFailed: 0 });
    expect(batch.body.results[0].encryptedData).toBe(newSsn);
    expect(batch.body.results[1].originalData).toBe(oldSsns[1]);

    const frameRes = await fetch(`${engine.url}/api/rewrap/batch`, {
      method: 'POST',
      headers: { 'content-type': BINARY_FRAME_TYPE },
      body: encodeRequestFrame('rewrap', [{ data: oldSsns[1] as string }]),
    });
    const frame = decodeResponseFrame(Buffer.from(await frameRes.arrayBuffer()));
    expect(frame.operation).toBe(0x83);
    expect(keyVersionOf(frame.items[0]?.data.toString('latin1') as string)).toBe(2);

    const streamRes = await fetch(`${engine.url}/api/rewrap/stream`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: `${JSON.stringify({ data: oldEmail })}\n`,
    });
    const line = JSON.parse((await streamRes.text()).trim());
    expect(keyVersionOf(line.data)).toBe(2);
    expect(await client.decrypt(line.data)).toBe(CANARY);

    // The audit file: one line per call, with transport, operation, key versions and counts.
    await eventually('the audit file holds the rewrap stream', async () =>
      (await auditEvents()).some((e) => e.transport === 'http-stream' && e.operation === 'rewrap'),
    );
    const events = await auditEvents();
    const find = (transport: string, operation: string) => events.filter((e) => e.transport === transport && e.operation === operation);
    expect(find('http-json', 'equality-terms')[0]).toMatchObject({
      policyCodes: ['PII_SSN'],
      keyVersions: [2, 1],
      items: { total: 1, succeeded: 1, failed: 0 },
      outcome: { result: 'ok', status: 200 },
      caller: { address: '127.0.0.1' },
    });
    expect(find('http-json', 'rewrap')[0]).toMatchObject({ policyCodes: ['PII_EMAIL'], keyVersions: [2], fromKeyVersions: [1] });
    expect(find('http-batch', 'rewrap')[0]).toMatchObject({ items: { total: 2, succeeded: 2, failed: 0 }, keyVersions: [2], fromKeyVersions: [1] });
    expect(find('http-frame', 'rewrap')[0]).toMatchObject({ items: { total: 1, succeeded: 1 } });
    expect(find('http-json', 'encrypt').length).toBeGreaterThanOrEqual(4);
    expect(find('http-json', 'decrypt').length).toBeGreaterThanOrEqual(3);
    // The hub's pushes reached the operations API: audited with a fingerprint of the tenant id.
    const ops = events.filter((e) => e.transport === 'operations' && e.outcome.status === 200);
    expect(ops.map((e) => e.operation)).toEqual(expect.arrayContaining(['runtime/identity', 'cache/policies/sync-all', 'cache/keys/sync']));
    const fingerprints = new Set(ops.map((e) => e.caller.tenant));
    expect(fingerprints.size).toBe(1);
    expect([...fingerprints][0]).toMatch(/^[0-9a-f]{16}$/);
    for (const e of events) expect(typeof e.requestId).toBe('string');
    const raw = await readFile(join(engine.dataDir, 'audit.log'), 'utf8');
    expect(raw).not.toContain(CANARY);
    expect(raw).not.toContain(TENANT);
    expect(raw).not.toContain(oldEmail.split(':')[2]);
    expect(raw).not.toContain(newSsn.split(':')[2]);
  });
});

describe('fail-closed auditing', () => {
  let closed: RunningEngine | undefined;
  afterAll(async () => {
    await closed?.dispose();
  });

  it('refuses execution with 503 while the audit file cannot be written, and serves once it can', async () => {
    const dir = join(engine.dataDir, 'closed-audit');
    await mkdir(dir, { recursive: true });
    const blocker = join(dir, 'logs');
    await writeFile(blocker, 'a file where the audit directory should be');
    closed = await startEngine({
      env: { SVC_AUDIT_FILE: join(blocker, 'audit.log'), SVC_AUDIT_FAIL_CLOSED: 'true' },
    });
    const call = () =>
      fetch(`${closed?.url}/api/encrypt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ data: 'x', policyCode: 'DEMO_RANDOM' }),
      });
    const refused = await call();
    expect(refused.status).toBe(503);
    expect(await refused.json()).toEqual({
      success: false,
      error: 'audit trail unavailable: requests are refused until it can be written',
    });
    expect(closed.output()).toContain('audit file cannot be opened');

    await rm(blocker);
    await mkdir(blocker);
    await eventually('the engine serves again once the audit file can be written', async () => (await call()).status === 200);
    await eventually('the served call is in the audit file', async () =>
      (await readFile(join(blocker, 'audit.log'), 'utf8').catch(() => '')).includes('"operation":"encrypt"'),
    );
  });
});
