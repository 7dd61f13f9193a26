// A TCP proxy that can cut a connection path and restore it on the same port: in front of PostgreSQL
// it makes the store "go away" for the engine (open connections reset, new ones refused) without
// stopping the run's shared server, and brings it back.
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  /** host:port to connect to instead of the target. */
  readonly port: number;
  /** Resets every connection and refuses new ones (the port stops listening). */
  cut(): Promise<void>;
  /** Listens again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;

  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  };

  const listen = async (): Promise<void> => {
    const next = createServer((client) => {
      const upstream = connect(targetPort, targetHost);
      track(client);
      track(upstream);
      client.pipe(upstream);
      upstream.pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((done, fail) => {
      next.once('error', fail);
      next.listen(port, '127.0.0.1', () => done());
    });
    const address = next.address();
    if (typeof address !== 'object' || !address) throw new Error('proxy has no address');
    port = address.port;
    server = next;
  };

  const cut = async (): Promise<void> => {
    const current = server;
    server = undefined;
    for (const socket of sockets) socket.destroy();
    if (current) await new Promise<void>((done) => current.close(() => done()));
  };

  await listen();
  return {
    get port() {
      return port;
    },
    cut,
    restore: () => (server ? Promise.resolve() : listen()),
    close: cut,
  };
}

/**
 * A TCP proxy to 127.0.0.1:`target` (the engine) that can stop forwarding what the client sends (an engine
 * that hangs: stall(true)), stop reading it at all, so the client's sends fill the socket buffers and wait
 * (deafen(true)), and that holds every chunk from the engine back for `answerDelayMs` (a slow one).
 */
export async function startStallingProxy(
  target: number,
  answerDelayMs = 0,
): Promise<{ port: number; stall: (on: boolean) => void; deafen: (on: boolean) => void; open: () => number; close: () => Promise<void> }> {
  let stalled = false;
  let deaf = false;
  const sockets = new Set<Socket>();
  /** The client sides of the open connections. */
  const clients = () => [...sockets].filter((s) => s.remotePort !== target);
  const server = createServer((client) => {
    if (deaf) client.pause();
    const upstream = connect(target, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.on('data', (chunk) => {
      if (!stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => (answerDelayMs > 0 ? setTimeout(() => client.write(chunk), answerDelayMs) : client.write(chunk)));
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    stall: (on) => {
      stalled = on;
    },
    deafen: (on) => {
      deaf = on;
      for (const client of clients()) {
        if (on) client.pause();
        else client.resume();
      }
    },
    /** Client connections open now. */
    open: () => clients().length,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Resolves once something accepts connections on 127.0.0.1:`port` (within about 10 s). */
export async function waitForPort(port: number): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (attempt > 200) throw new Error(`nothing listens on port ${port}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
