// The PostgreSQL wire endpoint's serial round trip: one `pg` client sends svc_encrypt and awaits the
// answer, again and again, as a dblink session does per row. Its floor, measured in the same run, is a
// trivial TCP echo server (its own process) answered one line at a time from this process: what a
// round trip over loopback costs with no protocol and no crypto. Also: svc_encrypt_many with 1000
// values per command, against the core's encryptMany (the batch floor of the main table).
import { connect } from 'node:net';
import pg from 'pg';
import { POLICY, plaintexts } from './in-process.mjs';
import { formatRate, rounds } from './measure.mjs';
import { cpuMicros, startBareServer } from './processes.mjs';

const b64 = (text) => (text === '' ? '-' : Buffer.from(text, 'utf8').toString('base64'));

/** Runs `once` serially for `seconds`; returns calls per second and the server's CPU per call. */
async function serial(pid, seconds, perCall, once) {
  const before = cpuMicros(pid);
  const start = process.hrtime.bigint();
  const until = start + BigInt(Math.round(seconds * 1e9));
  let calls = 0;
  let now = start;
  while (now < until) {
    await once();
    calls++;
    now = process.hrtime.bigint();
  }
  const elapsed = Number(now - start) / 1e9;
  return { rate: (calls * perCall) / elapsed, cpu: (cpuMicros(pid) - before) / (calls * perCall) };
}

function echoClient(port) {
  const socket = connect({ port, host: '127.0.0.1', noDelay: true });
  let waiting;
  socket.on('data', (chunk) => {
    if (chunk[chunk.length - 1] === 0x0a && waiting) {
      const resolve = waiting;
      waiting = undefined;
      resolve();
    }
  });
  const request = Buffer.from(`svc_encrypt ${b64(POLICY)} ${b64(plaintexts(1, 32)[0])}\n`);
  return {
    ready: new Promise((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    }),
    roundTrip: () =>
      new Promise((resolve) => {
        waiting = resolve;
        socket.write(request);
      }),
    close: () => socket.destroy(),
  };
}

export async function pgwireRoundTrips({ engine, seconds, warmupSeconds, roundCount, batchItems, log }) {
  const echo = await startBareServer('echo-server.mjs', 'tcp echo');
  const client = new pg.Client({ host: '127.0.0.1', port: engine.pgPort, user: 'svc', password: 'svc-dev', database: 'svc' });
  const tcp = echoClient(echo.port);
  try {
    await client.connect();
    await tcp.ready;
    const value = plaintexts(1, 32)[0];
    const single = `svc_encrypt ${b64(POLICY)} ${b64(value)}`;
    const values = plaintexts(batchItems, 32);
    const many = `svc_encrypt_many ${b64(POLICY)} ${values.map(b64).join(' ')}`;
    // Checked once, through decrypt, before it is put under load.
    const c = (await client.query(single)).rows[0].data;
    if ((await client.query(`svc_decrypt ${b64(c)}`)).rows[0].data !== value) throw new Error('pgwire round trip failed');
    const out = (await client.query(many)).rows;
    if (out.length !== batchItems) throw new Error('pgwire svc_encrypt_many returned the wrong row count');

    const samplers = {
      echo: (s) => serial(echo.pid, s, 1, tcp.roundTrip),
      wire: (s) => serial(engine.pid, s, 1, () => client.query(single)),
      wireMany: (s) => serial(engine.pid, s, batchItems, () => client.query(many)),
    };
    log('pgwire: warming up ...');
    for (const sample of Object.values(samplers)) await sample(warmupSeconds);
    const figures = Object.fromEntries(Object.entries(samplers).map(([name, sample]) => [name, () => sample(seconds)]));
    const results = await rounds(roundCount, figures, (round) => log(`pgwire round ${round}/${roundCount} done`));
    const e = results.get('echo');
    const w = results.get('wire');
    const m = results.get('wireMany');
    log(`  tcp echo: ${formatRate(e.median)}/s, pgwire svc_encrypt: ${formatRate(w.median)}/s, svc_encrypt_many x${batchItems}: ${formatRate(m.median)} items/s`);
    return { echo: e, wire: w, wireMany: m };
  } finally {
    await client.end().catch(() => {});
    tcp.close();
    await echo.stop();
  }
}
