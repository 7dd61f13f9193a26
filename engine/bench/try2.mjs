import pg from 'pg';
import { startEngine, cpuMicros } from './processes.mjs';
const engine = await startEngine();
const client = new pg.Client({ host: '127.0.0.1', port: engine.pgPort, user: 'svc', password: 'svc-dev', database: 'svc' });
await client.connect();
const q = `svc_encrypt ${Buffer.from('DEMO_RANDOM').toString('base64')} ${Buffer.from('x'.repeat(32)).toString('base64')}`;
for (let i = 0; i < 3000; i++) await client.query(q);
const before = cpuMicros(engine.pid); const t = Date.now(); let n = 0;
const cb = process.cpuUsage();
while (Date.now() - t < 3000) { await client.query(q); n++; }
const c = process.cpuUsage(cb);
console.log('rate', n / 3, 'server us/call', (cpuMicros(engine.pid) - before) / n, 'client us/call', (c.user + c.system) / n);
await client.end(); await engine.stop(); process.exit(0);
