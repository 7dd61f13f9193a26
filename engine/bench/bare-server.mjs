// The framework floor: a tiny Fastify app with one POST route that parses a JSON body and returns a
// constant small JSON. Run as its own process (like the engine) so the load generator does not share
// its event loop; it prints "listening <port>" when ready and exits on SIGTERM.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
const reply = { success: true, data: 'hub:BARE:AQAAAAEAconstant', policyCode: 'BARE' };
app.post('/bare', () => reply);

const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`listening ${new URL(address).port}\n`);
process.on('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
