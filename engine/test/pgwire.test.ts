// The PostgreSQL wire endpoint through a real socket and the `pg` client: authentication, every
// command, the bridges' error semantics, and the no-op statements libpq sends on its own.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { ExecutionService } from '../src/core/execution-service.js';
import type { ItemsRunner } from '../src/workers/protocol.js';
import { b64, PG_PASSWORD, PG_USER, TEST_VERSION, type WireWorld, wireWorld } from './support/pgwire.js';

let world: WireWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

async function pgError(promise: Promise<unknown>): Promise<{ code?: string; message: string; detail?: string; severity?: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: string; message: string; detail?: string };
  }
  throw new Error('expected an error');
}

describe('authentication', () => {
  it('accepts the configured user with SCRAM-SHA-256 and reports the server parameters', async () => {
    world = await wireWorld();
    const client = new pg.Client({ host: '127.0.0.1', port: world.listener.port, user: PG_USER, password: PG_PASSWORD, database: 'any' });
    const params: Record<string, string> = {};
    const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
    connection.on('parameterStatus', (m: { parameterName: string; parameterValue: string }) => {
      params[m.parameterName] = m.parameterValue;
    });
    await client.connect();
    try {
      expect(params).toMatchObject({
        server_version: `15.0 (svc engine ${TEST_VERSION})`,
        server_encoding: 'UTF8',
        client_encoding: 'UTF8',
        integer_datetimes: 'on',
        standard_conforming_strings: 'on',
        is_superuser: 'off',
      });
      const health = await client.query('svc_health');
      expect(health.rows).toEqual([{ status: 'UP', service: 'svc-engine', version: TEST_VERSION }]);
    } finally {
      await client.end();
    }
  });

  it('refuses a wrong password with 28P01', async () => {
    world = await wireWorld();
    const error = await pgError(world.client({ password: `${PG_PASSWORD}x` }));
    expect(error.code).toBe('28P01');
    expect(error.message).toBe('password authentication failed for user "svc"');
    expect(world.logs.join('\n')).not.toContain(PG_PASSWORD);
  });

  it('refuses another user name with the same error', async () => {
    world = await wireWorld();
    const error = await pgError(world.client({ user: 'postgres' }));
    expect(error.code).toBe('28P01');
    expect(error.message).toBe('password authentication failed for user "postgres"');
  });
});

describe('commands', () => {
  it('encrypts and decrypts one value by policy code and by name and version', async () => {
    world = await wireWorld();
    const client = await world.client();
    const { rows, fields } = await client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('ann@example.com')}`);
    expect(fields.map((f) => f.name)).toEqual(['data']);
    expect(rows[0].data).toMatch(/^hub:PII_GCM:/);
    const plain = await client.query(`svc_decrypt ${b64(rows[0].data)}`);
    expect(plain.rows).toEqual([{ data: 'ann@example.com' }]);

    const v2 = await client.query(`SVC_ENCRYPT_BY_NAME ${b64('customer')} 2 ${b64('x')};`);
    expect(v2.rows[0].data).toMatch(/^hub:CUSTOMER_V2:/);
    const latest = await client.query(`svc_encrypt_by_name ${b64('customer')} - ${b64('x')}`);
    expect(latest.rows[0].data).toMatch(/^hub:CUSTOMER_V2:/);
    const v1 = await client.query(`svc_encrypt_by_name ${b64('customer')} 1 -`);
    expect(v1.rows[0].data).toMatch(/^hub:CUSTOMER_V1:/);
    expect((await client.query(`svc_decrypt ${b64(v1.rows[0].data)}`)).rows).toEqual([{ data: '' }]);
  });

  it('encrypts and decrypts many values in order, one row each', async () => {
    world = await wireWorld();
    const client = await world.client();
    const values = ['a', '', 'ü 🎉', "'; DROP TABLE x; --"];
    const enc = await client.query(`svc_encrypt_many ${b64('PII_SIV')} ${values.map(b64).join(' ')}`);
    expect(enc.fields.map((f) => [f.name, f.dataTypeID])).toEqual([
      ['i', 23],
      ['data', 25],
    ]);
    expect(enc.rows.map((r) => r.i)).toEqual([1, 2, 3, 4]);
    const dec = await client.query(`svc_decrypt_many ${enc.rows.map((r) => b64(r.data)).join(' ')}`);
    expect(dec.rows).toEqual(values.map((data, i) => ({ i: i + 1, data })));

    const byName = await client.query(`svc_encrypt_many_by_name ${b64('customer')} 1 ${b64('p')} ${b64('q')}`);
    expect(byName.rows.map((r) => r.data.split(':')[1])).toEqual(['CUSTOMER_V1', 'CUSTOMER_V1']);
    expect((await client.query(`svc_encrypt_many ${b64('PII_GCM')}`)).rows).toEqual([]);
  });

  it('rewraps one and many ciphertexts and gives equality terms', async () => {
    world = await wireWorld();
    const client = await world.client();
    const c = (await client.query(`svc_encrypt ${b64('PII_SIV')} ${b64('v')}`)).rows[0].data as string;
    expect((await client.query(`svc_rewrap ${b64(c)}`)).rows).toEqual([{ data: c }]);
    expect((await client.query(`svc_rewrap_many ${b64(c)} ${b64(c)}`)).rows).toEqual([
      { i: 1, data: c },
      { i: 2, data: c },
    ]);
    const terms = await client.query(`svc_equality_terms ${b64('PII_SIV')} ${b64('v')}`);
    expect(terms.rows).toEqual([{ key_version: 1, data: c }]);
    const byName = await client.query(`svc_equality_terms_by_name ${b64('customer')} 2 ${b64('v')}`);
    expect(byName.rows[0].data).toMatch(/^hub:CUSTOMER_V2:/);
  });

  it('reports info without secrets', async () => {
    world = await wireWorld();
    const client = await world.client();
    const info = await client.query('svc_info');
    expect(info.rows).toEqual([
      { engine_version: TEST_VERSION, runtime_version: 'test', policy_count: 6, key_count: 2, configured: true },
    ]);
  });

  it('audits data commands with transport pgwire, the caller address and the user', async () => {
    world = await wireWorld();
    const client = await world.client();
    const c = (await client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('secret-canary')}`)).rows[0].data as string;
    await client.query(`svc_decrypt_many ${b64(c)}`);
    await pgError(client.query(`svc_encrypt ${b64('NOPE')} ${b64('x')}`));
    await client.query('svc_health');
    const events = world.audit.events();
    expect(events.map((e) => [e.transport, e.operation, e.caller.role, e.outcome.result])).toEqual([
      ['pgwire', 'encrypt', 'svc', 'ok'],
      ['pgwire', 'decrypt', 'svc', 'ok'],
      ['pgwire', 'encrypt', 'svc', 'error'],
    ]);
    expect(events[0]?.caller.address).toBe('127.0.0.1');
    expect(events[1]?.keyVersions).toEqual([1]);
    expect(world.audit.lines.join('\n')).not.toContain('secret-canary');
  });
});

describe('errors', () => {
  it('reports the bridges SQLSTATEs and messages, and the connection stays usable', async () => {
    world = await wireWorld();
    const client = await world.client();
    const notFound = await pgError(client.query(`svc_encrypt ${b64('NOPE')} ${b64('x')}`));
    expect([notFound.code, notFound.message]).toEqual(['SV001', 'svc_encrypt: policy not found: NOPE']);
    const tampered = await pgError(client.query(`svc_decrypt ${b64('hub:PII_GCM:AAAA')}`));
    expect(tampered.code).toBe('SV001');
    expect(tampered.message).toMatch(/^svc_decrypt: /);
    const bad = await pgError(client.query(`svc_decrypt ${b64('not a ciphertext')}`));
    expect([bad.code, bad.message]).toEqual(['SV001', 'svc_decrypt: malformed ciphertext']);
    expect((await client.query('svc_health')).rows[0].status).toBe('UP');
  });

  it('fails a whole array on its first bad item with DETAIL item i of n', async () => {
    world = await wireWorld();
    const client = await world.client();
    const good = (await client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('x')}`)).rows[0].data as string;
    const error = await pgError(client.query(`svc_decrypt_many ${b64(good)} ${b64('garbage')} ${b64('more garbage')}`));
    expect([error.code, error.message, error.detail]).toEqual(['SV001', 'svc_decrypt: malformed ciphertext', 'item 2 of 3']);
  });

  it('refuses more values than the batch limit with SV001', async () => {
    world = await wireWorld({ limits: { maxBatchItems: 3, maxDataBytes: 1024 } });
    const client = await world.client();
    const error = await pgError(client.query(`svc_encrypt_many ${b64('PII_GCM')} - - - -`));
    expect([error.code, error.message]).toEqual(['SV001', 'svc_encrypt: batch has 4 items; the limit is 3']);
    const big = await pgError(client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('x'.repeat(1025))}`));
    expect([big.code, big.message]).toEqual(['SV001', 'svc_encrypt: data exceeds 1024 bytes']);
  });

  it('answers SV002 while nothing is loaded', async () => {
    world = await wireWorld({ configured: false });
    const client = await world.client();
    const error = await pgError(client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('x')}`));
    expect([error.code, error.message]).toEqual(['SV002', 'svc_encrypt: crypto service is not configured']);
  });

  it('refuses unknown commands, wrong argument counts and bad arguments with clear errors', async () => {
    world = await wireWorld();
    const client = await world.client();
    const cases: [string, string, string][] = [
      ['SELECT 1', '42601', 'unknown command; see docs/pgwire.md'],
      ['svc_encrypt', '42601', 'svc_encrypt takes 2 arguments (policy_code value); see docs/pgwire.md'],
      [`svc_encrypt ${b64('PII_GCM')}  ${b64('x')}`, '42601', 'svc_encrypt takes 2 arguments (policy_code value); see docs/pgwire.md'],
      [`svc_encrypt ${b64('PII_GCM')} abc`, '22P02', 'svc_encrypt: argument 2 is not valid base64'],
      [`svc_encrypt ${b64('PII_GCM')} QR==`, '22P02', 'svc_encrypt: argument 2 is not valid base64'],
      [`svc_encrypt ${b64('PII_GCM')} /w==`, '22021', 'svc_encrypt: argument 2 is not valid UTF-8'],
      [`svc_encrypt_by_name ${b64('customer')} x1 -`, '22P02', 'svc_encrypt: argument 2 is not a decimal policy version or -'],
      [`svc_encrypt_by_name ${b64('customer')} 0 -`, 'SV001', 'svc_encrypt: policyVersion must be a positive integer'],
      ['SET client_encoding TO LATIN1', '22023', 'only UTF8 is supported'],
    ];
    for (const [query, code, message] of cases) {
      const error = await pgError(client.query(query));
      expect([query, error.code, error.message]).toEqual([query, code, message]);
    }
  });

  it('accepts line breaks inside base64 (PostgreSQL encode output) and the statements libpq sends', async () => {
    world = await wireWorld();
    const client = await world.client();
    const long = 'é'.repeat(100);
    const wrapped = Buffer.from(long).toString('base64').replace(/(.{76})/g, '$1\n');
    const c = (await client.query(`svc_encrypt ${b64('PII_GCM')} ${wrapped}`)).rows[0].data as string;
    expect((await client.query(`svc_decrypt ${b64(c)}`)).rows[0].data).toBe(long);
    for (const statement of ["SET client_encoding TO 'UTF8'", "set client_encoding = 'unicode'", 'SET datestyle = ISO', 'BEGIN', 'COMMIT', 'DISCARD ALL', '', ' ; ']) {
      await client.query(statement);
    }
  });

  it('refuses to return a plaintext PostgreSQL text cannot hold (U+0000)', async () => {
    world = await wireWorld();
    const client = await world.client();
    const [sealed] = world.execution.encryptBytesMany([{ data: Buffer.from('a\0b'), policyCode: 'PII_GCM' }]);
    const ciphertext = (sealed as { data: string }).data;
    const one = await pgError(client.query(`svc_decrypt ${b64(ciphertext)}`));
    expect([one.code, one.message]).toEqual(['SV001', 'svc_decrypt: decrypted data contains U+0000, which PostgreSQL text cannot hold']);
    const good = (await client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('fine')}`)).rows[0].data as string;
    const many = await pgError(client.query(`svc_decrypt_many ${b64(good)} ${b64(ciphertext)}`));
    expect([many.code, many.detail]).toEqual(['SV001', 'item 2 of 2']);
  });

  it('tells open sessions when the engine shuts down', async () => {
    world = await wireWorld();
    const client = await world.client();
    const ended = new Promise<{ code?: string; message: string }>((resolve) => {
      client.removeAllListeners('error');
      client.on('error', (e) => resolve(e as { code?: string; message: string }));
    });
    await world.listener.close(500);
    const error = await ended;
    expect([error.code, error.message]).toEqual(['57P01', 'terminating connection: the engine is shutting down']);
  });

  it('refuses the extended query protocol and recovers', async () => {
    world = await wireWorld();
    const client = await world.client();
    const error = await pgError(client.query('svc_health $1', ['x']));
    expect([error.code, error.message]).toEqual(['0A000', 'only the simple query protocol is supported; see docs/pgwire.md']);
    expect((await client.query('svc_health')).rows[0].status).toBe('UP');
  });
});

describe('many-value commands on the worker pool', () => {
  /** A stand-in for the worker pool: runs the batch method on this thread after `delayMs`, counting batches. */
  function slowPool(delayMs: number) {
    const seen: number[] = [];
    return {
      seen,
      batches: (execution: ExecutionService): ItemsRunner => ({
        run: async (method, items) => {
          seen.push(items.length);
          await new Promise((resolve) => setTimeout(resolve, delayMs));
          execution.checkBatchSize(items.length);
          return (execution[method] as (items: readonly unknown[]) => unknown[]).call(execution, items);
        },
      }),
    };
  }

  it('answers them when the pool does, in order, audited, with the bridges SQLSTATEs', async () => {
    const pool = slowPool(30);
    world = await wireWorld({ batches: pool.batches, limits: { maxBatchItems: 5, maxDataBytes: 1024 } });
    const client = await world.client();
    const values = ['a', '', 'ü 🎉'];
    const enc = await client.query(`svc_encrypt_many ${b64('PII_GCM')} ${values.map(b64).join(' ')}`);
    const dec = await client.query(`svc_decrypt_many ${enc.rows.map((r) => b64(r.data)).join(' ')}`);
    expect(dec.rows).toEqual(values.map((data, i) => ({ i: i + 1, data })));
    expect(pool.seen).toEqual([3, 3]);

    const bad = await pgError(client.query(`svc_decrypt_many ${b64(enc.rows[0].data)} ${b64('garbage')}`));
    expect([bad.code, bad.message, bad.detail]).toEqual(['SV001', 'svc_decrypt: malformed ciphertext', 'item 2 of 2']);
    const tooMany = await pgError(client.query(`svc_encrypt_many ${b64('PII_GCM')} - - - - - -`));
    expect([tooMany.code, tooMany.message]).toEqual(['SV001', 'svc_encrypt: batch has 6 items; the limit is 5']);
    expect((await client.query('svc_health')).rows[0].status).toBe('UP');

    const events = world.audit.events().filter((e) => e.transport === 'pgwire');
    expect(events.map((e) => [e.operation, e.items?.total, e.outcome.result])).toEqual([
      ['encrypt', 3, 'ok'],
      ['decrypt', 3, 'ok'],
      ['decrypt', 2, 'partial'],
      ['encrypt', 0, 'error'],
    ]);
  });

  it('answers a command still on the pool before telling the session the engine shuts down', async () => {
    world = await wireWorld({ batches: slowPool(300).batches });
    const client = await world.client();
    const ended = new Promise<{ code?: string; message: string }>((resolve) => {
      client.removeAllListeners('error');
      client.on('error', (e) => resolve(e as { code?: string; message: string }));
    });
    const answer = client.query(`svc_encrypt_many ${b64('PII_GCM')} ${b64('x')} ${b64('y')}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const closing = world.listener.close(5000);
    expect((await answer).rows.map((r) => r.i)).toEqual([1, 2]);
    const error = await ended;
    expect([error.code, error.message]).toEqual(['57P01', 'terminating connection: the engine is shutting down']);
    await closing;
  });
});
