// Fuzzing the wire endpoint: any text round-trips through encrypt and decrypt (one and many), any
// command text gets a result or an ErrorResponse and leaves the connection usable, and arbitrary bytes
// after authentication never take the listener down.
import fc from 'fast-check';
import { connect } from 'node:net';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Answer, runCommand } from '../src/pgwire/commands.js';
import { frameGuard, messageAssembler } from '../src/pgwire/frame-guard.js';
import { b64, type WireWorld, wireWorld } from './support/pgwire.js';

let world: WireWorld;
let client: pg.Client;
beforeAll(async () => {
  world = await wireWorld();
  client = await world.client();
});
afterAll(async () => {
  await world.close();
});

// PostgreSQL text cannot hold U+0000, and UTF-8 cannot carry a lone surrogate: every other string.
const sqlText = fc.string({ unit: 'binary', maxLength: 200 }).map((s) => s.replace(/\0/g, '').replace(/[\uD800-\uDFFF]/g, 'x'));
const tricky = fc.constantFrom("'", '"', '\\', '$$', ';', '--', '/*', ' ', '\n', '\t', '\uFEFF', 'E\'\\x00\'', '🎉', '\u{10FFFF}', 'ß', '\u202E', '=', '-', '+/');
const value = fc.oneof(sqlText, fc.array(fc.oneof(tricky, sqlText), { maxLength: 8 }).map((parts) => parts.join('')));

describe('values round-trip', () => {
  it('through svc_encrypt and svc_decrypt', async () => {
    await fc.assert(
      fc.asyncProperty(value, fc.constantFrom('PII_GCM', 'PII_SIV'), async (text, policy) => {
        const c = (await client.query(`svc_encrypt ${b64(policy)} ${b64(text)}`)).rows[0].data as string;
        const back = (await client.query(`svc_decrypt ${b64(c)}`)).rows[0].data as string;
        expect(back).toBe(text);
      }),
      { numRuns: 150 },
    );
  });

  it('through svc_encrypt_many and svc_decrypt_many, in order', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(value, { maxLength: 20 }), async (texts) => {
        const enc = await client.query(`svc_encrypt_many ${b64('PII_GCM')} ${texts.map(b64).join(' ')}`.trimEnd());
        const dec = await client.query(`svc_decrypt_many ${enc.rows.map((r) => b64(r.data as string)).join(' ')}`.trimEnd());
        expect(dec.rows.map((r) => r.data)).toEqual(texts);
      }),
      { numRuns: 60 },
    );
  });
});

describe('any command text', () => {
  const keyword = fc.constantFrom(
    'svc_encrypt', 'svc_encrypt_by_name', 'svc_decrypt', 'svc_rewrap', 'svc_encrypt_many', 'svc_encrypt_many_by_name',
    'svc_decrypt_many', 'svc_rewrap_many', 'svc_equality_terms', 'svc_equality_terms_by_name', 'svc_health', 'svc_info',
    'SET', 'set client_encoding to', 'BEGIN', 'select', '',
  );
  const argument = fc.oneof(fc.base64String({ maxLength: 40 }), fc.constantFrom('-', '0', '1', '4294967296', '=', ' ', ''), sqlText);
  const command = fc.oneof(
    sqlText,
    fc.tuple(keyword, fc.array(argument, { maxLength: 5 })).map(([k, args]) => [k, ...args].join(' ')),
  );

  it('gets a result or an ErrorResponse, never a crash, and the connection stays usable', async () => {
    await fc.assert(
      fc.asyncProperty(command, async (text) => {
        try {
          await client.query(text);
        } catch (error) {
          const code = (error as { code?: string }).code;
          expect(code, String(error)).toMatch(/^(SV00[12]|42601|22P02|22021|22023)$/);
        }
      }),
      { numRuns: 400 },
    );
    expect((await client.query('svc_health')).rows[0].status).toBe('UP');
    expect(world.logs.filter((l) => l.startsWith('error'))).toEqual([]);
  });

  it('never throws from the command layer', () => {
    const ctx = { execution: world.execution, version: 't', service: 's', audit: { transport: 'pgwire' as const } };
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (text) => {
        // Without a worker pool every answer is made at once.
        const answer = runCommand(ctx, text);
        expect(answer).not.toBeInstanceOf(Promise);
        expect(['rows', 'done', 'empty', 'error']).toContain((answer as Answer).kind);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('arbitrary bytes on the socket', () => {
  it('never take the listener down', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 300 }), fc.boolean(), async (bytes, afterStartup) => {
        const socket = connect(world.listener.port, '127.0.0.1');
        socket.on('error', () => {});
        await new Promise((r) => socket.once('connect', r));
        if (afterStartup) {
          const body = Buffer.from('user\0svc\0\0');
          const header = Buffer.alloc(8);
          header.writeInt32BE(8 + body.length, 0);
          header.writeInt32BE(196608, 4);
          socket.write(Buffer.concat([header, body]));
        }
        socket.write(bytes);
        await new Promise((r) => setTimeout(r, 5));
        socket.destroy();
      }),
      { numRuns: 150 },
    );
    const fresh = await world.client();
    expect((await fresh.query('svc_health')).rows[0].status).toBe('UP');
  });
});

describe('framing', () => {
  function message(type: number, body: Buffer): Buffer {
    const header = Buffer.alloc(5);
    header[0] = type;
    header.writeInt32BE(body.length + 4, 1);
    return Buffer.concat([header, body]);
  }

  it('cuts any split of a message stream back into the same messages', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0x41, max: 0x5a }), fc.uint8Array({ maxLength: 300 })), { minLength: 1, maxLength: 20 }),
        fc.array(fc.integer({ min: 1, max: 97 }), { minLength: 1, maxLength: 50 }),
        (specs, cuts) => {
          const messages = specs.map(([type, body]) => message(type, Buffer.from(body)));
          const stream = Buffer.concat(messages);
          const seen: Buffer[] = [];
          const guard = frameGuard({ maxMessageBytes: 1024, tls: false }, { fail: () => seen.push(Buffer.from('FAIL')), reply() {}, cancel() {} });
          const startup = Buffer.alloc(8);
          startup.writeInt32BE(8, 0);
          startup.writeInt32BE(196608, 4);
          const assemble = messageAssembler((m) => seen.push(Buffer.from(m)));
          let startupSeen = false;
          const forward = (bytes: Uint8Array) => {
            if (!startupSeen) {
              startupSeen = true;
              expect(Buffer.from(bytes).subarray(0, 8)).toEqual(startup);
              if (bytes.length > 8) assemble(bytes.subarray(8));
              return;
            }
            assemble(bytes);
          };
          const all = Buffer.concat([startup, stream]);
          let at = 0;
          let i = 0;
          while (at < all.length) {
            const size = cuts[i++ % cuts.length] as number;
            guard(all.subarray(at, at + size), forward);
            at += size;
          }
          expect(seen).toEqual(messages);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('stops at the header of an oversized message, wherever the chunks are cut', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20 }), (size) => {
        const failures: string[] = [];
        let forwarded = 0;
        const guard = frameGuard({ maxMessageBytes: 100, tls: false }, { fail: (code) => failures.push(code), reply() {}, cancel() {} });
        const startup = Buffer.alloc(8);
        startup.writeInt32BE(8, 0);
        startup.writeInt32BE(196608, 4);
        const all = Buffer.concat([startup, message(0x51, Buffer.alloc(10)), message(0x51, Buffer.alloc(1000))]);
        for (let at = 0; at < all.length; at += size) guard(all.subarray(at, at + size), (b) => (forwarded += b.length));
        expect(failures).toEqual(['54000']);
        // The start-up packet and the small message went through; of the big one, at most its header.
        expect(forwarded).toBeGreaterThanOrEqual(8 + 15);
        expect(forwarded).toBeLessThanOrEqual(8 + 15 + 5);
      }),
    );
  });
});
