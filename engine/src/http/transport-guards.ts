// Protections of a listener against slow and hostile clients, shared by every app: a cap on open
// connections, the time limit on receiving a request body, and the HTTP/1.1 checks Node would
// otherwise answer with empty bodies (missing Host, unknown Expect), rendered in the error catalogue.
// Streams keep their own timers (execution-stream.ts): they may last long while they keep moving.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Limits } from '../config.js';
import { errors } from '../core/errors.js';
import { NDJSON_TYPE } from './codecs/ndjson.js';
import { mediaType } from './content-type.js';
import { sendError } from './error-handler.js';
import type { EngineMetrics } from './metrics.js';

/** Connections refused at accept are counted (every one in the metric) and logged at most once per this interval. */
const DROP_LOG_INTERVAL_MS = 10_000;

function capConnections(app: FastifyInstance, maxConnections: number, refused?: { inc(): void }): void {
  app.server.maxConnections = maxConnections;
  let dropped = 0;
  let logged = 0;
  app.server.on('drop', () => {
    refused?.inc();
    dropped++;
    const now = Date.now();
    if (now - logged < DROP_LOG_INTERVAL_MS) return;
    logged = now;
    app.log.warn({ dropped, maxConnections }, 'connection limit reached (SVC_MAX_CONNECTIONS): new connections are closed at accept');
    dropped = 0;
  });
}

/** Node answers an Expect other than 100-continue with an empty 417; this one carries the error body. */
function refuseExpectations(app: FastifyInstance): void {
  app.server.on('checkExpectation', (request, response) => {
    const error = errors.expectationFailed();
    const body = JSON.stringify(error.body());
    response.writeHead(error.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    });
    // Node leaves out the body of an answer to HEAD.
    response.end(body);
  });
}

/**
 * Arms the request timeout, to fire at `deadline` (ms since the epoch), on a body that is still arriving
 * (not for streams: they keep their own timers).
 */
function guardBody(request: FastifyRequest, reply: FastifyReply, deadline: number): void {
  if (request.raw.complete || reply.sent || mediaType(request) === NDJSON_TYPE) return;
  const timer = setTimeout(() => {
    if (request.raw.complete || reply.sent) return;
    const error = errors.requestTimeout();
    reply.header('connection', 'close');
    // While the body parser reads, failing its input makes it report the error through the one
    // error handler; otherwise the answer is sent here. Either way the connection then closes.
    if (request.raw.listenerCount('error') > 0) request.raw.emit('error', error);
    else sendError(reply, error);
  }, Math.max(0, deadline - Date.now()));
  reply.raw.once('close', () => clearTimeout(timer));
}

export function installTransportGuards(app: FastifyInstance, limits: Limits, metrics?: Pick<EngineMetrics, 'connectionsRefused'>): void {
  capConnections(app, limits.maxConnections, metrics?.connectionsRefused);
  refuseExpectations(app);

  app.addHook('onRequest', (request, reply, done) => {
    // Node's own check (requireHostHeader) answers an empty 400; HTTP/1.1 requires Host.
    if (request.raw.httpVersion === '1.1' && !request.headers.host) {
      reply.header('connection', 'close');
      sendError(reply, errors.decode('the Host header is missing'));
      return;
    }
    // A body already received needs no timer. Most small requests arrive in the same read as their
    // headers, but Node parses the rest of that read (setting `complete`) only after this hook: so the
    // check is repeated once that I/O is done (setImmediate), and only a body still incomplete then gets
    // its timer, for what is left of the limit counted from now.
    if (!request.raw.complete) setImmediate(guardBody, request, reply, Date.now() + limits.requestTimeoutMs);
    done();
  });
}
