// The floor of a single JSON encrypt in Fastify: one POST route with the engine's own body and response
// schemas that calls the core's encryptOne and answers, and nothing else of the engine (no audit trail,
// request id, metrics, transport guards, drain accounting or strict JSON decoder). Beside the bare route
// it shows what the framework and the encryption cost by themselves; beside the engine, what the engine's
// own features cost. Own process, like the bare route; prints "listening <port>", exits on SIGTERM.
import Fastify from 'fastify';
import { EncryptBody, SingleResponse } from '../dist/http/schemas.js';
import { devExecutionService } from './in-process.mjs';

const service = devExecutionService();
const app = Fastify({ logger: false });
app.post('/api/encrypt', { schema: { body: EncryptBody, response: { 200: SingleResponse } } }, (request) => {
  const { data, policyCode } = service.encryptOne(request.body);
  return { success: true, data, policyCode };
});

const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`listening ${new URL(address).port}\n`);
process.on('SIGTERM', () => {
  app.close().then(() => process.exit(0));
});
