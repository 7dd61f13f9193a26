// The wire endpoint's limits and configuration: message size, connections, idle time, the password
// rule outside dev mode, and TLS. Real sockets; the raw ones speak just enough protocol to reach a limit.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, DEV_PG_PASSWORD, loadConfig } from '../src/config.js';
import { b64, type WireWorld, wireWorld } from './support/pgwire.js';

let world: WireWorld | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await world?.close();
  world = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function pgError(promise: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('expected an error');
}

/** Everything the server sends until it closes the socket. */
function untilClosed(socket: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  return new Promise((resolve) => socket.on('close', () => resolve(Buffer.concat(chunks))));
}

/** The SQLSTATE of the first ErrorResponse in a byte stream. */
function sqlstate(bytes: Buffer): string | undefined {
  const at = bytes.indexOf(0x45); // 'E'
  if (at < 0) return undefined;
  const fields = bytes.subarray(at + 5).toString('utf8').split('\0');
  return fields.find((f) => f.startsWith('C'))?.slice(1);
}

function startupPacket(user: string): Buffer {
  const body = Buffer.from(`user\0${user}\0database\0svc\0\0`);
  const header = Buffer.alloc(8);
  header.writeInt32BE(8 + body.length, 0);
  header.writeInt32BE(196608, 4);
  return Buffer.concat([header, body]);
}

describe('limits', () => {
  it('closes a connection whose message is over the size limit, before buffering it', async () => {
    world = await wireWorld({ bodyLimitBytes: 64 * 1024 });
    const client = await world.client();
    const error = await pgError(client.query(`svc_encrypt ${b64('PII_GCM')} ${b64('x'.repeat(100 * 1024))}`));
    expect(error.code).toBe('54000');
    expect(error.message).toBe('message exceeds 65536 bytes');
    // Within the limit on a new connection all is well.
    const again = await world.client();
    expect((await again.query(`svc_encrypt ${b64('PII_GCM')} ${b64('x'.repeat(1000))}`)).rows).toHaveLength(1);
  });

  it('refuses a header that claims a huge message without waiting for its body', async () => {
    world = await wireWorld({ bodyLimitBytes: 64 * 1024 });
    const socket = connect(world.listener.port, '127.0.0.1');
    const received = untilClosed(socket);
    // Before authentication pg-gateway expects the password message; a 1 GiB "query" header must end it.
    socket.write(startupPacket('svc'));
    const header = Buffer.alloc(5);
    header[0] = 0x70;
    header.writeInt32BE(1024 * 1024 * 1024, 1);
    socket.write(header);
    expect(sqlstate(await received)).toBe('54000');
  });

  it('refuses an invalid startup packet length', async () => {
    world = await wireWorld();
    const socket = connect(world.listener.port, '127.0.0.1');
    const received = untilClosed(socket);
    const packet = Buffer.alloc(8);
    packet.writeInt32BE(100_000, 0);
    socket.write(packet);
    expect(sqlstate(await received)).toBe('08P01');
  });

  it('refuses connections beyond the limit with 53300, and accepts again when one closes', async () => {
    world = await wireWorld({ config: { maxConnections: 2 } });
    const first = await world.client();
    await world.client();
    const error = await pgError(world.client());
    expect(error.code).toBe('53300');
    expect(error.message).toBe('too many connections to the engine (limit 2)');
    await first.end();
    await new Promise((r) => setTimeout(r, 50));
    const third = await world.client();
    expect((await third.query('svc_health')).rows[0].status).toBe('UP');
  });

  it('closes an idle connection with 57P05', async () => {
    world = await wireWorld({ config: { idleTimeoutMs: 200 } });
    const client = await world.client();
    const ended = new Promise<{ code?: string; message: string }>((resolve) => {
      client.removeAllListeners('error');
      client.on('error', (e) => resolve(e as { code?: string; message: string }));
    });
    const error = await ended;
    expect(error.code).toBe('57P05');
    expect(error.message).toBe('closing the idle connection');
  });

  it('declines GSSAPI encryption and answers a cancel request by closing', async () => {
    world = await wireWorld();
    const gss = connect(world.listener.port, '127.0.0.1');
    const request = Buffer.alloc(8);
    request.writeInt32BE(8, 0);
    request.writeInt32BE(80877104, 4);
    gss.write(request);
    const answer = await new Promise<Buffer>((resolve) => gss.once('data', resolve));
    expect(answer.toString()).toBe('N');
    gss.destroy();

    const cancel = connect(world.listener.port, '127.0.0.1');
    const closed = untilClosed(cancel);
    const packet = Buffer.alloc(16);
    packet.writeInt32BE(16, 0);
    packet.writeInt32BE(80877102, 4);
    cancel.write(packet);
    expect((await closed).length).toBe(0);
  });
});

describe('configuration', () => {
  it('is off unless SVC_PG_PORT is set, and on at 127.0.0.1:5433 with the dev credentials in dev mode', () => {
    expect(loadConfig({}, []).pgwire).toBeUndefined();
    expect(loadConfig({}, ['--dev']).pgwire).toMatchObject({
      host: '127.0.0.1',
      port: 5433,
      user: 'svc',
      password: DEV_PG_PASSWORD,
    });
  });

  it('refuses to start the listener outside dev mode without a password', () => {
    expect(() => loadConfig({ SVC_PG_PORT: '5433' }, [])).toThrow(ConfigError);
    expect(() => loadConfig({ SVC_PG_PORT: '5433' }, [])).toThrow(
      'SVC_PG_PORT is set: SVC_PG_PASSWORD or SVC_PG_PASSWORD_FILE is required (there is no default password)',
    );
    expect(() => loadConfig({ SVC_PG_PORT: '5433', SVC_PG_PASSWORD: 'p', SVC_PG_PASSWORD_FILE: '/x' }, [])).toThrow(
      'set only one of SVC_PG_PASSWORD and SVC_PG_PASSWORD_FILE',
    );
    expect(() => loadConfig({ SVC_PG_PORT: '5433', SVC_PG_PASSWORD: 'p', SVC_PG_TLS_CERT_FILE: '/x' }, [])).toThrow(
      'set both SVC_PG_TLS_CERT_FILE and SVC_PG_TLS_KEY_FILE, or neither',
    );
    const config = loadConfig({ SVC_PG_PORT: '6543', SVC_PG_USER: 'app', SVC_PG_PASSWORD: 'secret' }, []).pgwire;
    expect(config).toMatchObject({ port: 6543, user: 'app', password: 'secret', maxConnections: 64, idleTimeoutMs: 600_000 });
  });

  it('reads the password from SVC_PG_PASSWORD_FILE', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-pgwire-'));
    dirs.push(dir);
    const file = join(dir, 'password');
    writeFileSync(file, 'from-a-file\n');
    world = await wireWorld({ config: { password: undefined, passwordFile: file } });
    const client = await world.client({ password: 'from-a-file' });
    expect((await client.query('svc_health')).rows[0].status).toBe('UP');
  });
});

describe('TLS', () => {
  it('serves TLS when configured and then refuses plain-text connections', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-pgwire-tls-'));
    dirs.push(dir);
    const certFile = join(dir, 'cert.pem');
    const keyFile = join(dir, 'key.pem');
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=localhost', '-keyout', keyFile, '-out', certFile,
    ], { stdio: 'ignore' });
    world = await wireWorld({ config: { tls: { certFile, keyFile } } });
    const secure = await world.client({ ssl: { rejectUnauthorized: false } });
    const c = (await secure.query(`svc_encrypt ${b64('PII_GCM')} ${b64('over tls')}`)).rows[0].data as string;
    expect((await secure.query(`svc_decrypt ${b64(c)}`)).rows[0].data).toBe('over tls');
    const error = await pgError(world.client({ ssl: false }));
    expect(error.code).toBe('08P01');
    expect(error.message).toBe('SSL connection is required');
  });
});
