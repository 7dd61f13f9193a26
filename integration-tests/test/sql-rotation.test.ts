// Key rotation from SQL, end to end and in every bridge that runs here (PL/Python over HTTP, dblink over
// the engine's wire endpoint): the reference hub rotates the keys, equality terms find rows of both
// versions, svc_key_versions counts a column per version, svc_rewrap_column moves it to the new version
// in committed chunks (resuming after a failed chunk, cheap to run again), an operator then makes the
// old version refuse decryption, and the engine's audit file holds one event per call with its transport.
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { engineClient, eventually } from '../src/engine-client.js';
import { type SupervisedEngine, superviseEngine } from '../src/engine-supervisor.js';
import { type RunningHub, startHub } from '../src/hub-process.js';
import { createDatabase, dropDatabase, freePort, sqlFailure, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setDblinkServer, setEngineServer } from '../src/sql-install.js';
import { waitForPort } from '../src/tcp-proxy.js';

const TENANT = 'tenant-sql-rotation-41d2';
const MASTER_KEY = randomBytes(32).toString('base64');
const ENGINE_PASSWORD = 'sql-rotation-engine-password';
const adminUrl = inject('databaseUrl');
const ROWS = 1200;
const BRIDGES = ['plpython3u', 'dblink'] as const;
type Bridge = (typeof BRIDGES)[number];

let hub: RunningHub;
let engine: SupervisedEngine;
let client: ReturnType<typeof engineClient>;
/** A ciphertext made before the rotation and never rewrapped. */
let keptV1: string;
const urls = new Map<Bridge, string>();

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- result rows are whatever the SQL selects; the assertions check them.
type Row = Record<string, any>;

function inDb<T>(bridge: Bridge, use: (c: pg.Client) => Promise<T>): Promise<T> {
  return withClient(urls.get(bridge) as string, use);
}

async function notices(c: pg.Client, sql: string): Promise<string[]> {
  const seen: string[] = [];
  const listener = (n: { message?: string }) => seen.push(n.message ?? '');
  c.on('notice', listener);
  try {
    await c.query(sql);
  } finally {
    c.off('notice', listener);
  }
  return seen;
}

/** { 'PII_SSN:1': n, ... } from svc_key_versions; `-` for values that are not ciphertexts. */
async function versions(c: pg.Client, table: string): Promise<Record<string, number>> {
  const { rows } = await c.query(`SELECT * FROM svc_key_versions('${table}', 'v')`);
  return Object.fromEntries(rows.map((r: Row) => [`${r.policy_code ?? '-'}:${r.key_version ?? '-'}`, Number(r.value_count)]));
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
  const pgPort = await freePort();
  engine = await superviseEngine({
    SVC_MASTER_KEY: MASTER_KEY,
    SVC_AUDIT_FLUSH_INTERVAL_MS: '50',
    SVC_PG_PORT: String(pgPort),
    SVC_PG_USER: 'svc',
    SVC_PG_PASSWORD: ENGINE_PASSWORD,
  });
  client = engineClient(engine.url, TENANT, engine.opsUrl);
  await hub.admin('POST', `/tenants/${TENANT}/register`, { engineUrl: engine.opsUrl });
  await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'full' });
  await waitForPort(pgPort);

  for (const bridge of BRIDGES) {
    const url = await createDatabase(adminUrl, `svc_rotation_${bridge}_it`);
    urls.set(bridge, url);
    await applyMigrations(url, { 'svc.bridge': bridge });
    if (bridge === 'dblink') await setDblinkServer(url, { port: pgPort, password: ENGINE_PASSWORD });
    else await setEngineServer(url, { url: engine.url });
    // Under version 1: a deterministic column (equality search) and a randomized one.
    await inDb(bridge, async (c) => {
      await c.query(`CREATE TABLE ssn (id int PRIMARY KEY, v text NOT NULL);
        CREATE INDEX ssn_v ON ssn (v);
        CREATE TABLE email (id int PRIMARY KEY, v text);`);
      await c.query(`INSERT INTO ssn SELECT g, svc_encrypt('ssn-' || g, 'PII_SSN') FROM generate_series(1, ${ROWS}) g`);
      await c.query(`INSERT INTO email SELECT g, CASE WHEN g % 100 = 0 THEN NULL ELSE 'user' || g || '@example.com' END
                       FROM generate_series(1, ${ROWS}) g`);
      await c.query('CALL svc_encrypt_column(\'email\', \'v\', \'PII_EMAIL\', 500)');
    });
  }
  keptV1 = await client.encrypt('kept', 'PII_SSN');
  await hub.admin('POST', `/tenants/${TENANT}/keys/pii-gcm/rotate`);
  await hub.admin('POST', `/tenants/${TENANT}/keys/pii-siv/rotate`);
  await hub.admin('POST', `/tenants/${TENANT}/push`, { engineUrl: engine.opsUrl, mode: 'incremental' });
}, 120_000);

afterAll(async () => {
  await engine?.dispose();
  await hub?.dispose();
  for (const bridge of BRIDGES) await dropDatabase(adminUrl, `svc_rotation_${bridge}_it`).catch(() => undefined);
});

describe.each(BRIDGES)('key rotation from SQL, %s bridge', (bridge) => {
  it('reads key versions without the engine and counts a column per version', async () => {
    await inDb(bridge, async (c) => {
      const sample = (await c.query('SELECT v FROM ssn WHERE id = 1')).rows[0].v as string;
      const read = await c.query(
        `SELECT svc_key_version($1) AS old, svc_key_version(svc_encrypt('x', 'PII_SSN')) AS new,
                svc_key_version('plain text') AS plain, svc_key_version('hub:P:!!!!') AS junk`,
        [sample],
      );
      expect(read.rows[0]).toEqual({ old: 1, new: 2, plain: null, junk: null });
      expect(await versions(c, 'email')).toEqual({ 'PII_EMAIL:1': ROWS - ROWS / 100 });
      expect((await sqlFailure(c.query('SELECT * FROM svc_key_versions(\'email\', \'id\')'))).message).toBe(
        'svc_key_versions: public.email has no text column id',
      );
    });
  });

  it('rewraps single values and arrays to the newest version inside the engine', async () => {
    await inDb(bridge, async (c) => {
      const { rows } = await c.query(
        `WITH o AS (SELECT v FROM email WHERE id = 1)
         SELECT svc_rewrap(o.v) AS one, svc_rewrap(ARRAY[o.v, NULL, o.v]) AS many, svc_rewrap(NULL::text) AS none, o.v AS old FROM o`,
      );
      const r = rows[0] as Row;
      expect(await c.query('SELECT svc_key_version($1) AS k, svc_decrypt($1) AS p', [r.one]).then((x) => x.rows[0])).toEqual({
        k: 2,
        p: 'user1@example.com',
      });
      expect(r.many[1]).toBeNull();
      expect(r.many.filter((v: string | null) => v !== null).map((v: string) => v.startsWith('hub:PII_EMAIL:'))).toEqual([true, true]);
      expect(r.none).toBeNull();
      // Already at the newest version: returned unchanged.
      expect((await c.query('SELECT svc_rewrap($1) AS again', [r.one])).rows[0].again).toBe(r.one);
      const refused = await sqlFailure(c.query('SELECT svc_rewrap(\'hub:NO_SUCH_POLICY:AQEAAAABAAAAAAAAAAAAAAAAAAAAAAAA\')'));
      expect(refused.code).toBe('SV001');
      expect(refused.message).toContain('svc_rewrap: policy not found: NO_SUCH_POLICY');
    });
  });

  it('finds equal values under both versions with svc_equality_terms, through the index', async () => {
    await inDb(bridge, async (c) => {
      // Row 2 written again under version 2: the same value now exists under both versions.
      await c.query(`INSERT INTO ssn VALUES (${ROWS + 1}, svc_encrypt('ssn-2', 'PII_SSN'))`);
      const terms = (await c.query('SELECT svc_equality_terms(\'ssn-2\', \'PII_SSN\') AS t')).rows[0].t as string[];
      expect(terms.map((t) => t.startsWith('hub:PII_SSN:'))).toEqual([true, true]);
      const versionsOfTerms = await c.query('SELECT array_agg(svc_key_version(t) ORDER BY n) AS k FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n)', [terms]);
      expect(versionsOfTerms.rows[0].k).toEqual([2, 1]);
      await c.query('ANALYZE ssn');
      // A table this small is cheaper to scan; the plan question is whether the index can be used at all.
      await c.query('SET enable_seqscan = off');
      const query = 'SELECT id FROM ssn WHERE v = ANY ((SELECT svc_equality_terms(\'ssn-2\', \'PII_SSN\'))::text[]) ORDER BY id';
      expect((await c.query(query)).rows.map((r: Row) => r.id)).toEqual([2, ROWS + 1]);
      const plan = (await c.query(`EXPLAIN (COSTS OFF) ${query}`)).rows.map((r: Row) => r['QUERY PLAN']).join('\n');
      expect(plan).toMatch(/Index (Only )?Scan using ssn_v on ssn|Bitmap Index Scan on ssn_v/);
      expect((await sqlFailure(c.query('SELECT svc_equality_terms(\'x\', \'PII_EMAIL\')'))).message).toContain(
        'svc_equality_terms: equality terms need a deterministic policy: PII_EMAIL',
      );
      expect(await c.query('SELECT svc_equality_terms(NULL, \'PII_SSN\') AS t').then((x) => x.rows[0].t)).toBeNull();
    });
  });

  it('rewraps a column in committed chunks, resumes after a failed chunk, and a second run rewrites nothing', async () => {
    await inDb(bridge, async (c) => {
      const before = await versions(c, 'ssn');
      expect(before).toEqual({ 'PII_SSN:1': ROWS, 'PII_SSN:2': 1 });
      const dry = await notices(c, 'CALL svc_rewrap_column(\'ssn\', \'v\', dry_run => true)');
      expect(dry).toEqual([
        `svc_rewrap_column (dry run): policy PII_SSN, key version 1: ${ROWS} values`,
        'svc_rewrap_column (dry run): policy PII_SSN, key version 2: 1 values',
      ]);
      expect(await versions(c, 'ssn')).toEqual(before);

      // A value the engine refuses, in the middle: the chunks before it stay committed.
      const broken = 'hub:PII_SSN:AQIAAAABAAAAAAAAAAAAAAAAAAAAAAAA';
      await c.query('UPDATE ssn SET v = $1 WHERE id = 700', [broken]);
      const failed = await sqlFailure(c.query('CALL svc_rewrap_column(\'ssn\', \'v\', 200)'));
      expect(failed.code).toBe('SV001');
      expect(failed.message).toContain('svc_rewrap: decryption failed');
      const partial = await versions(c, 'ssn');
      expect(partial['PII_SSN:2']).toBe(1 + 600);
      await c.query('UPDATE ssn SET v = svc_encrypt(\'ssn-700\', \'PII_SSN\') WHERE id = 700');

      const resumed = await notices(c, 'CALL svc_rewrap_column(\'ssn\', \'v\', 200)');
      expect(resumed.at(-1)).toMatch(new RegExp(`^svc_rewrap_column: finished, ${ROWS - 601} values rewrapped of \\d+ examined in [0-9.]+ s$`));
      expect(resumed[0]).toMatch(/^svc_rewrap_column: \d+ values examined, \d+ rewrapped, \d+ values\/s$/);
      expect(await versions(c, 'ssn')).toEqual({ 'PII_SSN:2': ROWS + 1 });
      expect((await c.query('SELECT svc_decrypt(v) AS p FROM ssn WHERE id IN (1, 700, 1200) ORDER BY id')).rows.map((r: Row) => r.p)).toEqual([
        'ssn-1',
        'ssn-700',
        'ssn-1200',
      ]);
      // Deterministic: a rewrapped value equals a fresh encrypt, so a single term finds it again.
      expect((await c.query('SELECT count(*)::int AS n FROM ssn WHERE v = (SELECT svc_encrypt(\'ssn-2\', \'PII_SSN\'))')).rows[0].n).toBe(2);

      const again = await notices(c, 'CALL svc_rewrap_column(\'ssn\', \'v\', 200)');
      expect(again.at(-1)).toMatch(/^svc_rewrap_column: finished, 0 values rewrapped of \d+ examined/);
      // Only the first two chunks go to the engine (the second is read and sent before the first answer
      // tells the newest version); the rest is skipped in SQL.
      expect(Number(/of (\d+) examined/.exec(again.at(-1) as string)?.[1])).toBeLessThanOrEqual(400);
    });
  });

  it('rewraps a randomized column, leaving NULLs and plaintext alone', async () => {
    await inDb(bridge, async (c) => {
      await c.query(`INSERT INTO email VALUES (${ROWS + 1}, 'not encrypted yet')`);
      await notices(c, 'CALL svc_rewrap_column(\'email\', \'v\', 500)');
      expect(await versions(c, 'email')).toEqual({ 'PII_EMAIL:2': ROWS - ROWS / 100, '-:-': 1 });
      const { rows } = await c.query('SELECT count(*) FILTER (WHERE v IS NULL)::int AS nulls, count(*) FILTER (WHERE svc_decrypt(v) = \'user\' || id || \'@example.com\')::int AS ok FROM email WHERE id <= $1', [ROWS]);
      expect(rows[0]).toEqual({ nulls: ROWS / 100, ok: ROWS - ROWS / 100 });
    });
  });
});

describe('after every column is rewrapped', () => {
  it('an operator makes version 1 refuse decryption: old ciphertexts fail in SQL, rewrapped ones read', async () => {
    const kept = await client.encrypt('kept', 'PII_SSN');
    for (const alias of ['pii-gcm', 'pii-siv']) {
      const set = await client.ops('POST', '/keys/min-decryption-version', { alias, minDecryptionVersion: 2 });
      expect(set.status).toBe(200);
    }
    for (const bridge of BRIDGES) {
      await inDb(bridge, async (c) => {
        for (const call of ['svc_decrypt', 'svc_rewrap']) {
          const refused = await sqlFailure(c.query(`SELECT ${call}($1)`, [keptV1]));
          expect(refused.code).toBe('SV001');
          expect(refused.message).toContain(`${call}: key pii-siv version 1 is below the minimum decryption version 2`);
        }
        expect((await c.query('SELECT count(*)::int AS n FROM ssn WHERE svc_decrypt(v) LIKE \'ssn-%\'')).rows[0].n).toBe(ROWS + 1);
        expect((await c.query('SELECT svc_decrypt($1) AS p', [kept])).rows[0].p).toBe('kept');
        // A version that may not decrypt gives no equality term any more.
        expect((await c.query('SELECT svc_equality_terms(\'kept\', \'PII_SSN\') AS t')).rows[0].t).toEqual([kept]);
      });
    }
  });

  it('the audit file holds one event per SQL call, by transport, with counts and never a value', async () => {
    await eventually('the audit file holds the SQL rewraps', async () => {
      const events = await auditEvents();
      return events.some((e) => e.transport === 'pgwire' && e.operation === 'rewrap') && events.some((e) => e.transport === 'http-frame' && e.operation === 'rewrap');
    });
    const events = await auditEvents();
    const rewraps = (transport: string) => events.filter((e) => e.operation === 'rewrap' && e.transport === transport);
    // PL/Python sends arrays as binary-frame batches; dblink as wire *_many commands: one event per chunk, not per value.
    for (const transport of ['http-frame', 'pgwire']) {
      const chunks = rewraps(transport);
      expect(chunks.length).toBeGreaterThan(0);
      expect(chunks.length).toBeLessThan(ROWS / 10);
      expect(chunks.some((e) => e.items.total >= 200 && e.keyVersions.includes(2) && e.fromKeyVersions.includes(1))).toBe(true);
    }
    expect(events.some((e) => e.operation === 'equality-terms' && e.transport === 'pgwire')).toBe(true);
    // The chunk with the refused value is audited with its failure.
    expect(events.some((e) => e.operation === 'rewrap' && (e.items?.failed > 0 || e.outcome.result !== 'ok'))).toBe(true);
    const raw = await readFile(join(engine.dataDir, 'audit.log'), 'utf8');
    expect(raw).not.toContain('ssn-1');
    expect(raw).not.toContain('@example.com');
  });
});
