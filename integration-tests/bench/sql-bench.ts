// `npm run bench:sql`: rows per second of the SQL bridge in one run on one database, each beside the floor
// it is judged against, measured in the same run:
//   - per row (1 and 8 sessions) against a PL/Python raw-socket round trip per row to a trivial Node echo
//     server (PL/Python) or a dblink round trip to PostgreSQL itself (dblink);
//   - the array form and the bulk procedure against the engine's own binary-frame batch rate (frames of
//     svc.batch_size items POSTed from Node, one after another on one connection, as the bridge sends them);
//   - pgcrypto's encrypt_iv per row over the same rows as the in-database reference;
//   - the PL/Python bridge a second time, over the engine's wire endpoint (option wire_url, psycopg2), on a
//     database of its own, its per-row figure in turn with the same floor.
// Single-session figures and their floors are measured in turn, round by round, so a burst of other load
// on a shared machine hits both alike. It ends with the ratios and their targets. A measurement, not a
// test: it prints figures and asserts nothing.
// plv8 is not measured: the bench's PostgreSQL has no plv8 (the plv8 bridge is tested in a container).
// Settings: SVC_BENCH_ROWS (default 50000), SVC_BENCH_PER_ROW_ROWS (default 10000), SVC_BENCH_REPEAT (3).
import { Agent, request } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { loadavg, cpus } from 'node:os';
import pg from 'pg';
import { BINARY_FRAME_TYPE, encodeRequestFrame, RESPONSE_HEADER_LENGTH } from '../../engine/src/http/codecs/binary-frame.js';
import { startEngine } from '../src/engine-process.js';
import { createDatabase, freePort, startPostgres, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setDblinkServer, setEngineServer } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const ROWS = Number(process.env.SVC_BENCH_ROWS ?? 50_000);
const PER_ROW_ROWS = Math.min(ROWS, Number(process.env.SVC_BENCH_PER_ROW_ROWS ?? 10_000));
const REPEAT = Number(process.env.SVC_BENCH_REPEAT ?? 3);
const SESSIONS = 8;
/** svc.batch_size's default: the array form sends requests of this many items. */
const BATCH_SIZE = 1000;
const KEY = "'\\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'::bytea";
const IV = "'\\x000102030405060708090a0b0c0d0e0f'::bytea";
const BENCH_PG_PASSWORD = 'bench-only-password';
/**
 * Floor of the PL/Python per-row path: one raw-socket round trip per row (a few bytes out, the echo back)
 * from PL/Python to a Node server, on a connection kept in GD as the bridge keeps its own.
 */
const ECHO_FUNCTION = `CREATE FUNCTION bench_echo(port int) RETURNS int LANGUAGE plpython3u AS $py$
import socket
s = GD.get('bench_echo')
if s is None:
    s = GD['bench_echo'] = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b'ping')
got = b''
while len(got) < 4:
    chunk = s.recv(16)
    if not chunk:
        raise RuntimeError('echo server closed the connection')
    got += chunk
return len(got)
$py$`;

interface Figure {
  name: string;
  rows: number;
  seconds: number;
}

const rate = (f: Figure) => f.rows / f.seconds;

/** The best time of REPEAT runs (`before` runs untimed ahead of each). */
async function best(run: () => Promise<unknown>, before?: () => Promise<unknown>): Promise<number> {
  let seconds = Number.POSITIVE_INFINITY;
  for (let i = 0; i < REPEAT; i++) {
    if (before) await before();
    const start = process.hrtime.bigint();
    await run();
    seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
  }
  return seconds;
}

/**
 * The best time of each of several runs over REPEAT rounds, every round running each once in turn, so a
 * burst of other load on a shared machine hits a figure and its floor alike.
 */
async function bestInTurn(runs: ReadonlyMap<string, () => Promise<unknown>>): Promise<Map<string, number>> {
  const seconds = new Map<string, number>();
  for (let i = 0; i < REPEAT; i++) {
    for (const [key, run] of runs) {
      const start = process.hrtime.bigint();
      await run();
      seconds.set(key, Math.min(seconds.get(key) ?? Number.POSITIVE_INFINITY, Number(process.hrtime.bigint() - start) / 1e9));
    }
  }
  return seconds;
}

/** `perRow` in SESSIONS sessions at once, each over its share of the per-row rows (pgbench-like clients). */
async function inSessions(url: string, perRow: (share: string) => string): Promise<number> {
  const clients = await Promise.all(
    Array.from({ length: SESSIONS }, async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      return c;
    }),
  );
  try {
    // Warm-up: load the bridge and open the engine connection in every backend.
    await Promise.all(clients.map((c, k) => c.query(perRow(`id <= ${SESSIONS} AND id % ${SESSIONS} = ${k}`))));
    return await best(() =>
      Promise.all(clients.map((c, k) => c.query(perRow(`id <= ${PER_ROW_ROWS} AND id % ${SESSIONS} = ${k}`)))),
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

/** A Node server that echoes what it reads: the far end of the PL/Python raw-socket floor. */
async function startEchoServer(): Promise<{ port: number; close(): void }> {
  const server = createServer((socket) => {
    socket.setNoDelay(true);
    socket.on('error', () => undefined);
    socket.on('data', (chunk) => socket.write(chunk));
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  return { port: (server.address() as AddressInfo).port, close: () => server.close() };
}

/** A run POSTing `rows` items to the engine from Node in frames of `batch`, one after another (warmed up). */
async function engineFrameRun(engineUrl: string, batch: number, rows: number): Promise<() => Promise<void>> {
  const frames: Buffer[] = [];
  for (let start = 1; start <= rows; start += batch) {
    const items = [];
    for (let id = start; id < Math.min(start + batch, rows + 1); id++) {
      items.push({ policyCode: POLICIES.random, data: `user${id}@example.com` });
    }
    frames.push(encodeRequestFrame('encrypt', items));
  }
  // node:http on one keep-alive socket: the lightest client Node has, so the figure is the engine's.
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const target = new URL('/api/encrypt/batch', engineUrl);
  const post = (frame: Buffer): Promise<void> =>
    new Promise((done, fail) => {
      const req = request(target, {
        method: 'POST',
        agent,
        headers: { 'content-type': BINARY_FRAME_TYPE, 'content-length': frame.length },
      }, (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () => {
          // Only the header's totalFailed is read: decoding every item in JS would time this client, not the engine.
          const body = Buffer.concat(chunks);
          if (answer.statusCode !== 200 || body.length < RESPONSE_HEADER_LENGTH || body.readUInt32BE(16) !== 0) {
            fail(new Error('engine frame bench: items failed'));
          } else done();
        });
        answer.on('error', fail);
      });
      req.on('error', fail);
      req.end(frame);
    });
  for (const frame of frames.slice(0, 5)) await post(frame);
  return async () => {
    for (const frame of frames) await post(frame);
  };
}

async function main(): Promise<void> {
  const postgres = await startPostgres();
  const pgPort = await freePort();
  const engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_PG_PORT: String(pgPort), SVC_PG_USER: 'svc', SVC_PG_PASSWORD: BENCH_PG_PASSWORD },
  });
  const echo = await startEchoServer();
  const figures = new Map<string, Figure>();
  const add = (key: string, name: string, rows: number, seconds: number) => figures.set(key, { name, rows, seconds });
  let plv8Available = false;
  try {
    const url = await createDatabase(postgres.adminUrl, 'svc_bench');
    await applyMigrations(url);
    await setEngineServer(url, { url: engine.url });
    await withClient(url, async (c) => {
      await c.query('CREATE EXTENSION IF NOT EXISTS pgcrypto');
      await c.query(`CREATE TABLE src (id int PRIMARY KEY, v text);
        INSERT INTO src SELECT g, 'user' || g || '@example.com' FROM generate_series(1, ${ROWS}) g; ANALYZE src;`);
      await c.query(ECHO_FUNCTION);
      plv8Available = (await c.query("SELECT 1 FROM pg_available_extensions WHERE name = 'plv8'")).rowCount === 1;
    });
    const perRow = (where: string) => `SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE ${where}`;
    const echoRow = (where: string) => `SELECT count(bench_echo(${echo.port})) FROM src WHERE ${where}`;
    await withClient(url, async (c) => {
      // Warm-up: load the bridge and open the engine connection in this backend.
      await c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}'), svc_encrypt(ARRAY['warm'], '${POLICIES.random}'), bench_echo(${echo.port})`);
      const single: [key: string, name: string, rows: number, run: () => Promise<unknown>][] = [
        ['engine', `engine: binary-frame batch of ${BATCH_SIZE} from Node`, ROWS, await engineFrameRun(engine.url, BATCH_SIZE, ROWS)],
        // Not a target but a pointer: the engine's own time per request limits every per-row bridge.
        ['engine.one', 'engine: one-item binary frame per request from Node', PER_ROW_ROWS, await engineFrameRun(engine.url, 1, PER_ROW_ROWS)],
        ['pgcrypto', 'pgcrypto encrypt_iv per row (AES-256-CBC, reference)', ROWS,
          () => c.query(`SELECT count(encrypt_iv(convert_to(v, 'UTF8'), ${KEY}, ${IV}, 'aes-cbc')) FROM src`)],
        ['py.floor', 'floor: PL/Python raw-socket round trip per row', PER_ROW_ROWS, () => c.query(echoRow(`id <= ${PER_ROW_ROWS}`))],
        ['py.row', 'svc_encrypt per row', PER_ROW_ROWS, () => c.query(perRow(`id <= ${PER_ROW_ROWS}`))],
        ['py.array', 'svc_encrypt(text[]) array form', ROWS,
          () => c.query(`SELECT cardinality(svc_encrypt(array_agg(v), '${POLICIES.random}')) FROM src`)],
      ];
      const seconds = await bestInTurn(new Map(single.map(([key, , , run]) => [key, run])));
      for (const [key, name, rows] of single) add(key, name, rows, seconds.get(key) as number);
    });
    add('py.floor8', `floor: PL/Python raw-socket round trip, ${SESSIONS} sessions`, PER_ROW_ROWS, await inSessions(url, echoRow));
    add('py.row8', `svc_encrypt per row, ${SESSIONS} sessions`, PER_ROW_ROWS, await inSessions(url, perRow));
    // The procedure commits, so it runs outside any transaction block, on a fresh copy each time.
    await withClient(url, async (c) => {
      add('py.bulk', 'svc_encrypt_column bulk procedure', ROWS, await best(
        () => c.query(`CALL svc_encrypt_column('bulk', 'v', '${POLICIES.random}', 10000)`),
        () => c.query('DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT * FROM src; ALTER TABLE bulk ADD PRIMARY KEY (id)'),
      ));
    });
    for (const [key, figure] of await wireFigures(postgres.adminUrl, engine.url, pgPort, echo.port)) figures.set(key, figure);
    for (const [key, figure] of await dblinkFigures(postgres.adminUrl, pgPort)) figures.set(key, figure);
  } finally {
    echo.close();
    await engine.dispose();
    await postgres.stop();
  }
  const reference = figures.get('pgcrypto') as Figure;
  console.log(`SQL bridge benchmark: ${ROWS} rows (${PER_ROW_ROWS} for per-row calls), best of ${REPEAT}, ` +
    `${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('method'.padEnd(56) + 'rows/s'.padStart(12) + 'x pgcrypto'.padStart(12));
  for (const f of figures.values()) {
    console.log(f.name.padEnd(56) + Math.round(rate(f)).toString().padStart(12) + (rate(f) / rate(reference)).toFixed(4).padStart(12));
  }
  console.log(plv8Available
    ? 'plv8: available in this PostgreSQL, but the bench does not measure it (its bridge needs the http extension)'
    : 'plv8: not measured - this PostgreSQL has no plv8 extension');
  console.log('\ntarget'.padEnd(57) + 'ratio'.padStart(12) + 'target'.padStart(12) + '  met');
  const ratio = (label: string, a: string, b: string, target?: number) => {
    const fa = figures.get(a);
    const fb = figures.get(b);
    if (!fa || !fb) return;
    const r = rate(fa) / rate(fb);
    const verdict = target === undefined ? ['(info)', ''] : [`>= ${target}`, r >= target ? '  yes' : '  no'];
    console.log(label.padEnd(56) + r.toFixed(3).padStart(12) + (verdict[0] as string).padStart(12) + verdict[1]);
  };
  ratio('PL/Python per row / its floor', 'py.row', 'py.floor', 0.6);
  ratio('PL/Python per row / engine one-item requests from Node', 'py.row', 'engine.one');
  ratio(`PL/Python per row, ${SESSIONS} sessions / 1 session`, 'py.row8', 'py.row', 3);
  ratio('PL/Python array form / engine binary-frame batch', 'py.array', 'engine', 0.8);
  ratio('PL/Python bulk procedure / engine binary-frame batch', 'py.bulk', 'engine', 0.6);
  ratio('PL/Python over the wire: per row / its floor', 'pw.row', 'pw.floor', 0.6);
  ratio('PL/Python over the wire: per row / PL/Python over HTTP', 'pw.row', 'py.row');
  ratio(`PL/Python over the wire: per row, ${SESSIONS} sessions / 1 session`, 'pw.row8', 'pw.row', 3);
  ratio('PL/Python over the wire: array form / engine batch', 'pw.array', 'engine', 0.8);
  ratio('PL/Python over the wire: bulk procedure / engine batch', 'pw.bulk', 'engine', 0.6);
  ratio('dblink per row / its floor', 'db.row', 'db.floor', 0.6);
  ratio('dblink per row / engine one-item requests from Node', 'db.row', 'engine.one');
  ratio(`dblink per row, ${SESSIONS} sessions / 1 session`, 'db.row8', 'db.row', 3);
  ratio('dblink array form / engine binary-frame batch', 'db.array', 'engine', 0.8);
  ratio('dblink bulk procedure / engine binary-frame batch', 'db.bulk', 'engine', 0.6);
  console.log(`(the floors' own ${SESSIONS}-session scaling, for comparison: PL/Python ` +
    `${(rate(figures.get('py.floor8') as Figure) / rate(figures.get('py.floor') as Figure)).toFixed(2)}x on ${cpus().length} cores)`);
}

/**
 * The PL/Python bridge over the engine's wire endpoint (option wire_url, psycopg2) on a database of its own,
 * its per-row figure measured in turn with the PL/Python floor (a raw-socket round trip to `echoPort`).
 */
async function wireFigures(adminUrl: string, engineUrl: string, pgPort: number, echoPort: number): Promise<Map<string, Figure>> {
  const figures = new Map<string, Figure>();
  const url = await createDatabase(adminUrl, 'svc_bench_wire');
  await applyMigrations(url);
  await setEngineServer(url, { url: engineUrl, wire: { url: `postgresql://127.0.0.1:${pgPort}/svc`, user: 'svc', password: BENCH_PG_PASSWORD } });
  await withClient(url, async (c) => {
    await c.query(`CREATE TABLE src (id int PRIMARY KEY, v text);
      INSERT INTO src SELECT g, 'user' || g || '@example.com' FROM generate_series(1, ${ROWS}) g; ANALYZE src;`);
  });
  const perRow = (where: string) => `SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE ${where}`;
  const add = (key: string, name: string, rows: number, seconds: number) => figures.set(key, { name, rows, seconds });
  await withClient(url, async (c) => {
    await c.query(ECHO_FUNCTION);
    await c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}'), bench_echo(${echoPort})`);
    const seconds = await bestInTurn(new Map<string, () => Promise<unknown>>([
      ['pw.floor', () => c.query(`SELECT count(bench_echo(${echoPort})) FROM src WHERE id <= ${PER_ROW_ROWS}`)],
      ['pw.row', () => c.query(perRow(`id <= ${PER_ROW_ROWS}`))],
    ]));
    add('pw.floor', 'floor: PL/Python raw-socket round trip (wire database)', PER_ROW_ROWS, seconds.get('pw.floor') as number);
    add('pw.row', 'PL/Python over the wire: svc_encrypt per row', PER_ROW_ROWS, seconds.get('pw.row') as number);
    add('pw.array', 'PL/Python over the wire: svc_encrypt(text[])', ROWS, await best(() =>
      c.query(`SELECT cardinality(svc_encrypt(array_agg(v), '${POLICIES.random}')) FROM src`)));
  });
  add('pw.row8', `PL/Python over the wire: per row, ${SESSIONS} sessions`, PER_ROW_ROWS, await inSessions(url, perRow));
  await withClient(url, async (c) => {
    add('pw.bulk', 'PL/Python over the wire: svc_encrypt_column', ROWS, await best(
      () => c.query(`CALL svc_encrypt_column('bulk', 'v', '${POLICIES.random}', 10000)`),
      () => c.query('DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT * FROM src; ALTER TABLE bulk ADD PRIMARY KEY (id)'),
    ));
  });
  return figures;
}

/** The dblink bridge on a database of its own, through the engine's wire endpoint on `pgPort`. */
async function dblinkFigures(adminUrl: string, pgPort: number): Promise<Map<string, Figure>> {
  const figures = new Map<string, Figure>();
  const url = await createDatabase(adminUrl, 'svc_bench_dblink');
  await applyMigrations(url, { 'svc.bridge': 'dblink' });
  const self = new URL(url);
  await setDblinkServer(url, { port: pgPort, password: BENCH_PG_PASSWORD });
  await withClient(url, async (c) => {
    await c.query(`CREATE TABLE src (id int PRIMARY KEY, v text);
      INSERT INTO src SELECT g, 'user' || g || '@example.com' FROM generate_series(1, ${ROWS}) g; ANALYZE src;`);
  });
  const perRow = (where: string) => `SELECT count(svc_encrypt(v, '${POLICIES.random}')) FROM src WHERE ${where}`;
  await withClient(url, async (c) => {
    await c.query(`SELECT svc_encrypt('warm', '${POLICIES.random}')`);
    // Floor: one dblink round trip per row to PostgreSQL itself (SELECT <id> on a loopback connection).
    await c.query('SELECT dblink_connect(\'floor\', $1)', [
      `host=${self.hostname} port=${self.port || 5432} dbname=svc_bench_dblink user=${decodeURIComponent(self.username)}` +
        (self.password ? ` password=${decodeURIComponent(self.password)}` : ''),
    ]);
    const add = (key: string, name: string, rows: number, seconds: number) => figures.set(key, { name, rows, seconds });
    const seconds = await bestInTurn(new Map<string, () => Promise<unknown>>([
      ['db.floor', () => c.query(`SELECT count((SELECT t.x FROM dblink('floor', 'SELECT ' || id) AS t(x int))) FROM src WHERE id <= ${PER_ROW_ROWS}`)],
      ['db.row', () => c.query(perRow(`id <= ${PER_ROW_ROWS}`))],
    ]));
    add('db.floor', 'floor: dblink round trip to PostgreSQL per row', PER_ROW_ROWS, seconds.get('db.floor') as number);
    add('db.row', 'dblink: svc_encrypt per row', PER_ROW_ROWS, seconds.get('db.row') as number);
    add('db.array', 'dblink: svc_encrypt(text[]) array form', ROWS, await best(() =>
      c.query(`SELECT cardinality(svc_encrypt(array_agg(v), '${POLICIES.random}')) FROM src`)));
  });
  figures.set('db.row8', { name: `dblink: svc_encrypt per row, ${SESSIONS} sessions`, rows: PER_ROW_ROWS, seconds: await inSessions(url, perRow) });
  await withClient(url, async (c) => {
    figures.set('db.bulk', {
      name: 'dblink: svc_encrypt_column bulk procedure',
      rows: ROWS,
      seconds: await best(
        () => c.query(`CALL svc_encrypt_column('bulk', 'v', '${POLICIES.random}', 10000)`),
        () => c.query('DROP TABLE IF EXISTS bulk; CREATE TABLE bulk AS SELECT * FROM src; ALTER TABLE bulk ADD PRIMARY KEY (id)'),
      ),
    });
  });
  return figures;
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
