// Graceful shutdown: once draining starts, new requests get 503 (and the connection is closed) while
// requests and streams already in flight run to completion; then the app closes.
import type { FastifyInstance } from 'fastify';
import { errors } from '../core/errors.js';
import { sendError } from './error-handler.js';

export interface Lifecycle {
  readonly draining: boolean;
  /** Refuse new work, wait for in-flight requests (at most graceMs), then close the app. */
  shutdown(graceMs: number): Promise<void>;
}

export function installLifecycle(app: FastifyInstance): Lifecycle {
  let draining = false;
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const settle = () => {
    inFlight--;
    if (inFlight === 0) idle?.();
  };

  app.addHook('onRequest', (_request, reply, done) => {
    if (draining) {
      reply.header('connection', 'close');
      sendError(reply, errors.shuttingDown());
      return;
    }
    inFlight++;
    // 'close' fires once per response, whether it finished or the client went away (a plain listener:
    // `once` would wrap it in a new function per request).
    reply.raw.on('close', settle);
    done();
  });

  return {
    get draining() {
      return draining;
    },
    async shutdown(graceMs: number) {
      draining = true;
      if (inFlight > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, graceMs);
          timer.unref();
          idle = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      if (app.server.listening) app.server.closeAllConnections();
      await app.close();
    },
  };
}
