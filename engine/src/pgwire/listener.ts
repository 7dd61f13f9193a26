// The PostgreSQL wire endpoint's listener (docs/pgwire.md): a transport of its own beside http/, over
// the same execution service. pg-gateway speaks the protocol's hard part (start-up, the SSL request
// and TLS upgrade, the SCRAM-SHA-256 exchange); this module adds what an engine needs around it: one
// configured user, limits on connections, message size and idle time, and, once a session is
// authenticated, its simple queries answered straight from the socket (commands.ts renders them).
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { createSecureContext, type SecureContext, TLSSocket } from 'node:tls';
import {
  type ConnectionState,
  closeSignal,
  createScramSha256Data,
  type DuplexStream,
  PostgresConnection,
  type ScramSha256Data,
  verifyScramSha256Password,
} from 'pg-gateway';
import type { Logger } from 'pino';
import type { Limits, PgWireConfig } from '../config.js';
import type { ExecutionService } from '../core/execution-service.js';
import type { ItemsRunner } from '../workers/protocol.js';
import { type Answer, runCommand, SQLSTATE } from './commands.js';
import { type FrameGuard, frameGuard, type GuardEvents, messageAssembler } from './frame-guard.js';
import { answerMessages, errorMessage, parameterStatus, readyForQuery } from './messages.js';

export interface PgWireOptions {
  readonly execution: ExecutionService;
  /** Runs large *_many commands on the crypto workers; absent: on the main thread. */
  readonly batches?: ItemsRunner;
  readonly config: PgWireConfig;
  readonly limits: Pick<Limits, 'bodyLimitBytes'>;
  readonly version: string;
  readonly log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** The service name svc_health reports (the one GET /api/health reports). */
  readonly service: string;
}

export interface PgWireListener {
  /** `host:port` as bound. */
  readonly address: string;
  readonly port: number;
  /** Stops accepting, tells open sessions the engine is going away, and closes them. */
  close(graceMs?: number): Promise<void>;
}

/** PostgreSQL iterates 4096 times by default; the verifier is derived once, at start-up. */
const SCRAM_ITERATIONS = 4096;

const QUERY = 0x51; // 'Q'
const SYNC = 0x53; // 'S'
const TERMINATE = 0x58; // 'X'
const PASSWORD = 0x70; // 'p'
/** Extended query protocol (Parse, Bind, Describe, Execute, Close, Flush) and FunctionCall. */
const EXTENDED = new Set([0x50, 0x42, 0x44, 0x45, 0x43, 0x48, 0x46]);
/** COPY data from the client: never requested, ignored as PostgreSQL does outside COPY. */
const COPY_FROM_CLIENT = new Set([0x64, 0x63, 0x66]);
const EXTENDED_REFUSED = 'only the simple query protocol is supported; see docs/pgwire.md';

const utf8 = new TextDecoder('utf-8', { fatal: true });
const NOTHING = new Uint8Array(0);
/**
 * pg-gateway acts on its close signal wherever a hook yields it (it closes the connection), though
 * its hook type only names byte arrays.
 */
const CLOSE = closeSignal as unknown as Uint8Array;

/**
 * The bytes of one socket (the TCP socket, or the TLS socket over it), all through the frame guard.
 * Until authentication completes they go to pg-gateway as the web stream it reads; then `direct()`
 * hands the session over: the stream pg-gateway reads ends, and whole messages go straight to the
 * engine's handler, synchronously, with no stream machinery per query (the wire endpoint's hot path).
 * The stream ends (rather than errors) when the socket fails: a client resetting its connection is
 * an ordinary end of a session, not something to report.
 */
class SocketFeed {
  readonly readable: ReadableStream<Uint8Array>;
  #controller?: ReadableStreamDefaultController<Uint8Array>;
  #open = true;
  #direct?: (bytes: Uint8Array) => void;

  constructor(
    readonly stream: Duplex,
    private readonly guard: FrameGuard,
  ) {
    this.readable = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.#controller = controller;
        stream.on('data', (chunk: Buffer) => this.#receive(chunk));
        stream.on('end', () => this.#end());
        stream.on('close', () => this.#end());
        stream.on('error', () => this.#end());
      },
      pull: () => {
        stream.resume();
      },
      cancel: () => {
        this.#open = false;
        stream.destroy();
      },
    });
  }

  /** From now on, whole messages go to `onMessage`; pg-gateway's stream ends. */
  direct(onMessage: (message: Buffer) => void): void {
    this.#direct = messageAssembler(onMessage);
    this.#end();
    this.stream.resume();
  }

  #receive(chunk: Buffer): void {
    if (this.#direct) {
      this.guard(chunk, this.#direct);
      return;
    }
    if (!this.#open) return;
    const controller = this.#controller as ReadableStreamDefaultController<Uint8Array>;
    // pg-gateway reads lengths through a DataView of the chunk's whole ArrayBuffer, so it needs
    // chunks that start at offset 0 of their buffer: a view into a larger one is copied.
    this.guard(chunk, (bytes) => controller.enqueue(bytes.byteOffset === 0 ? bytes : new Uint8Array(bytes)));
    // Backpressure: stop reading while pg-gateway has not caught up.
    if ((controller.desiredSize ?? 1) <= 0) this.stream.pause();
  }

  #end(): void {
    if (!this.#open) return;
    this.#open = false;
    this.#controller?.close();
  }
}

async function readPassword(config: PgWireConfig): Promise<string> {
  if (config.passwordFile === undefined) return config.password as string;
  let text: string;
  try {
    text = await readFile(config.passwordFile, 'utf8');
  } catch (error) {
    throw new Error(`SVC_PG_PASSWORD_FILE: cannot read ${config.passwordFile} (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`);
  }
  const password = text.replace(/\r?\n$/, '');
  if (password === '') throw new Error('SVC_PG_PASSWORD_FILE is empty');
  return password;
}

async function tlsContext(config: PgWireConfig): Promise<SecureContext | undefined> {
  if (!config.tls) return undefined;
  const [cert, key] = await Promise.all([readFile(config.tls.certFile), readFile(config.tls.keyFile)]);
  return createSecureContext({ cert, key, minVersion: 'TLSv1.2' });
}

/** Server parameters libpq and dblink expect after authentication (docs/pgwire.md section 1). */
function serverParameters(version: string, state: ConnectionState): Uint8Array[] {
  return [
    parameterStatus('server_version', `15.0 (svc engine ${version})`),
    parameterStatus('server_encoding', 'UTF8'),
    parameterStatus('client_encoding', 'UTF8'),
    parameterStatus('DateStyle', 'ISO, MDY'),
    parameterStatus('integer_datetimes', 'on'),
    parameterStatus('standard_conforming_strings', 'on'),
    parameterStatus('TimeZone', 'UTC'),
    parameterStatus('is_superuser', 'off'),
    // libpq 14+ reads these for target_session_attrs instead of asking with SHOW.
    parameterStatus('in_hot_standby', 'off'),
    parameterStatus('default_transaction_read_only', 'off'),
    parameterStatus('session_authorization', state.clientParams?.user ?? ''),
    parameterStatus('application_name', state.clientParams?.application_name ?? ''),
  ];
}

export async function startPgWire(options: PgWireOptions): Promise<PgWireListener> {
  const { execution, batches, config, log, version, service } = options;
  const password = await readPassword(config);
  // Only the verifier is kept: the password itself is not needed after this line.
  const scram: ScramSha256Data = await createScramSha256Data(password, SCRAM_ITERATIONS);
  const secureContext = await tlsContext(config);
  const maxMessageBytes = options.limits.bodyLimitBytes;
  const sessions = new Set<Session>();

  interface Session {
    readonly socket: Socket;
    /** The socket messages go out on: the TLS socket once upgraded. */
    out: Duplex;
    /** What reads it. */
    feed?: SocketFeed;
    /** Set once the session is being closed: pg-gateway's later writes are dropped. */
    closing: boolean;
    /** Sends a FATAL error and closes the connection. */
    fatal(code: string, message: string): void;
    /** The command being answered on the worker pool, if any: later messages wait for it. */
    running?: Promise<void>;
  }

  const server: Server = createServer({ noDelay: true }, (socket) => {
    const caller = socket.remoteAddress;
    const session: Session = {
      socket,
      out: socket,
      closing: false,
      fatal(code, message) {
        if (this.closing || this.out.destroyed || this.out.writableEnded) return;
        this.closing = true;
        this.out.end(errorMessage('FATAL', code, message));
        // A client that stops reading must not keep the socket open.
        setTimeout(() => socket.destroy(), 1000).unref();
      },
    };
    socket.on('error', () => socket.destroy());
    if (sessions.size >= config.maxConnections) {
      session.fatal('53300', `too many connections to the engine (limit ${config.maxConnections})`);
      return;
    }
    sessions.add(session);
    socket.on('close', () => sessions.delete(session));
    socket.setTimeout(config.idleTimeoutMs, () => session.fatal('57P05', 'closing the idle connection'));

    const guardEvents: GuardEvents = {
      fail: (code, message) => session.fatal(code, message),
      reply: (bytes) => session.out.write(bytes),
      cancel: () => socket.destroy(),
    };
    /**
     * The streams pg-gateway reads and writes: reads pass the frame guard; writes stop once the
     * session closes (pg-gateway would otherwise report a write after end on the console).
     */
    const streams = (stream: Duplex, tls: boolean): DuplexStream<Uint8Array> => {
      session.feed = new SocketFeed(stream, frameGuard({ maxMessageBytes, tls }, guardEvents));
      return {
        readable: session.feed.readable,
        writable: new WritableStream<Uint8Array>({
          write: (chunk) => {
            if (session.closing || stream.destroyed || stream.writableEnded) return undefined;
            if (stream.write(chunk)) return undefined;
            return new Promise<void>((resolve) => {
              const done = () => {
                stream.off('drain', done);
                stream.off('close', done);
                resolve();
              };
              stream.on('drain', done);
              stream.on('close', done);
            });
          },
          close: () => {
            if (!session.closing) stream.end();
          },
          abort: () => {
            stream.destroy();
          },
        }),
      };
    };

    let authFailed = false;
    /** The authenticated user, recorded as the audit events' role. */
    let role: string | undefined;
    // After an error in the extended protocol, messages are skipped until Sync (as PostgreSQL does).
    let skipToSync = false;

    const connection = new PostgresConnection(
      streams(socket, secureContext !== undefined),
      {
        auth: {
          method: 'scram-sha-256',
          // Every user name gets the same salt and iterations: the answer does not reveal which exist.
          getScramSha256Data: () => scram,
          validateCredentials: async ({ authMessage, clientProof, username }) => {
            const proofOk = await verifyScramSha256Password({ authMessage, clientProof, storedKey: scram.storedKey });
            authFailed = !(proofOk && username === config.user);
            return !authFailed;
          },
        },
        // With a TLS option pg-gateway answers SSL requests with `S` and refuses plain-text start-ups; the
        // certificate itself is in `secureContext`, used by the upgrade adapter below.
        ...(secureContext ? { tls: { key: new ArrayBuffer(0), cert: new ArrayBuffer(0) } } : {}),
        onMessage: (data, state) => {
          if (state.step === 'PerformingAuthentication') return authenticate(data, state);
          if (state.step !== 'ReadyForQuery') return undefined;
          // Only a client that sent a query before the end of authentication gets here.
          handle(Buffer.from(data));
          return [NOTHING];
        },
      },
      {
        // pg-gateway's Node adapter would read the raw stream; this one keeps the guard on the plaintext.
        upgradeTls: async (duplex) => {
          const tlsSocket = new TLSSocket(Duplex.fromWeb(duplex as never), { isServer: true, secureContext });
          tlsSocket.on('error', () => socket.destroy());
          try {
            await once(tlsSocket, 'secure');
          } catch {
            socket.destroy();
            // pg-gateway treats an aborted stream as a closed connection, without logging it.
            throw Object.assign(new Error('TLS handshake failed'), { code: 'ABORT_ERR' });
          }
          session.out = tlsSocket;
          return { duplex: streams(tlsSocket, false), tlsInfo: {} };
        },
      },
    );

    /**
     * SCRAM messages go to pg-gateway's own flow; this wrapper only reports a wrong password with
     * PostgreSQL's SQLSTATE (28P01) and adds the server parameters libpq expects before ReadyForQuery.
     */
    async function* authenticate(data: Uint8Array, state: ConnectionState): AsyncGenerator<Uint8Array> {
      const flow = connection.authFlow;
      if (data[0] !== PASSWORD || !flow) {
        yield errorMessage('FATAL', '08P01', 'expected a password message');
        yield CLOSE;
        return;
      }
      // As pg-gateway's own handler does: the flow parses the message after its type byte.
      connection.bufferReader.byte();
      try {
        for await (const message of flow.handleClientMessage(data)) {
          if (authFailed && message instanceof Uint8Array && message[0] === 0x45) {
            yield errorMessage('FATAL', '28P01', `password authentication failed for user "${state.clientParams?.user ?? ''}"`);
            log.warn({ caller, user: state.clientParams?.user }, 'pgwire: password authentication failed');
            continue;
          }
          yield message as Uint8Array;
        }
      } catch {
        // A SASL message pg-gateway cannot parse.
        yield errorMessage('FATAL', '08P01', 'invalid authentication message');
        yield CLOSE;
        return;
      }
      if (!flow.isCompleted) return;
      for await (const message of connection.completeAuthentication()) {
        if (message[0] === 0x5a) yield* serverParameters(version, state);
        yield message;
      }
      // ReadyForQuery is written: from here on the engine reads this session's messages itself.
      role = state.clientParams?.user;
      session.feed?.direct(handle);
    }

    /** Messages that arrived while a command was answered on the worker pool, in order. */
    const waiting: Buffer[] = [];

    /**
     * One message of an authenticated session; answers are written in order, as they are made. While a
     * command is answered on the worker pool, reading pauses and what was already read waits its turn.
     */
    function handle(message: Buffer): void {
      if (session.running) {
        waiting.push(message);
        // Again: a drain of an earlier answer may have resumed reading (see send()).
        session.feed?.stream.pause();
        return;
      }
      const type = message[0] as number;
      if (type === QUERY) {
        skipToSync = false;
        const answer = query(message);
        if (!(answer instanceof Promise)) {
          send(answerMessages(answer));
          return;
        }
        session.feed?.stream.pause();
        session.running = answer.then((later) => {
          send(answerMessages(later));
          session.running = undefined;
          // Unless that write filled the socket: then send() resumes reading once it drains.
          if (!session.out.writableNeedDrain) session.feed?.stream.resume();
          while (waiting.length > 0 && !session.running) handle(waiting.shift() as Buffer);
        });
      } else if (type === SYNC) {
        skipToSync = false;
        send(readyForQuery());
      } else if (EXTENDED.has(type)) {
        if (!skipToSync) send(errorMessage('ERROR', SQLSTATE.NOT_SUPPORTED, EXTENDED_REFUSED));
        skipToSync = true;
      } else if (type === TERMINATE) {
        session.closing = true;
        session.out.end();
      } else if (!COPY_FROM_CLIENT.has(type)) {
        session.fatal('08P01', `invalid frontend message type ${type}`);
      }
    }

    function send(bytes: Uint8Array): void {
      if (session.closing || session.out.destroyed) return;
      if (session.out.write(bytes)) return;
      // The client reads slower than it asks: stop reading its queries until it catches up.
      const feed = session.feed;
      feed?.stream.pause();
      session.out.once('drain', () => feed?.stream.resume());
    }

    function query(data: Uint8Array): Answer | Promise<Answer> {
      let text: string;
      try {
        // Type byte and length, then the query and its NUL terminator.
        text = utf8.decode(data.subarray(5, data.length - 1));
      } catch {
        return { kind: 'error', code: SQLSTATE.BAD_ENCODING, message: 'query is not valid UTF-8' };
      }
      // A bug, never the client's data: logged here, answered without internals.
      const internal = (error: unknown): Answer => {
        log.error({ err: error, caller }, 'pgwire: command failed');
        return { kind: 'error', code: SQLSTATE.INTERNAL, message: 'internal error' };
      };
      try {
        const answer = runCommand({ execution, batches, version, service, audit: { transport: 'pgwire', caller, role } }, text);
        return answer instanceof Promise ? answer.catch(internal) : answer;
      } catch (error) {
        return internal(error);
      }
    }
  });

  server.maxConnections = config.maxConnections + 16; // beyond it the kernel-level refusal; ours answers first
  server.listen({ host: config.host, port: config.port });
  await once(server, 'listening');
  const bound = server.address() as AddressInfo;
  const address = `${bound.address}:${bound.port}`;
  log.info({ pgwireAddress: address, tls: secureContext !== undefined, user: config.user }, 'PostgreSQL wire endpoint listening');

  return {
    address,
    port: bound.port,
    async close(graceMs = 1000) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      const deadline = setTimeout(() => {
        for (const session of sessions) session.socket.destroy();
      }, graceMs);
      // Commands on the worker pool are answered first (within the grace time); then each client is told
      // why it is going away (PostgreSQL's admin shutdown SQLSTATE) and closed.
      const running = [...sessions].map((session) => session.running).filter((r) => r !== undefined);
      if (running.length > 0) await Promise.race([Promise.all(running), new Promise((resolve) => setTimeout(resolve, graceMs).unref())]);
      for (const session of sessions) session.fatal('57P01', 'terminating connection: the engine is shutting down');
      await closed;
      clearTimeout(deadline);
    },
  };
}
