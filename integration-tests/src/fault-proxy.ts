// A small HTTP proxy in front of the engine for fault tests: it counts requests per path (and the most in
// flight at once), can hold answers back (a slow engine), and can be switched to swallow requests without
// answering (a hung engine), to stop reading them at all (an engine stuck before it reads the body), or to
// reset every connection.
import { createServer, type IncomingMessage, request, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export type ProxyMode = 'forward' | 'hang' | 'deaf' | 'reset';

export interface FaultProxy {
  readonly url: string;
  mode: ProxyMode;
  /** Requests seen per path since the last reset of the counters. */
  readonly counts: Map<string, number>;
  /** TCP connections accepted so far. */
  readonly connections: () => number;
  /** Every answer is held back this long before it is forwarded. */
  delayMs: number;
  /** The most requests in flight at once since it was last set to 0. */
  peak: number;
  /** Closes every open client connection (as an engine restart would). */
  dropConnections(): void;
  close(): Promise<void>;
}

export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const upstream = new URL(target);
  const sockets = new Set<Socket>();
  const counts = new Map<string, number>();
  let accepted = 0;
  let inFlight = 0;
  const proxy: FaultProxy = {
    url: '',
    mode: 'forward',
    counts,
    connections: () => accepted,
    delayMs: 0,
    peak: 0,
    dropConnections: () => {
      for (const socket of sockets) socket.destroy();
    },
    close: () =>
      new Promise((done) => {
        proxy.dropConnections();
        server.close(() => done());
      }),
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = req.url ?? '/';
    counts.set(path, (counts.get(path) ?? 0) + 1);
    if (proxy.mode === 'hang') return; // keep the connection open, never answer
    if (proxy.mode === 'deaf') {
      // Read nothing more: once the socket buffers are full, the caller's send waits.
      req.socket.pause();
      return;
    }
    if (proxy.mode === 'reset') {
      req.socket.destroy();
      return;
    }
    inFlight += 1;
    proxy.peak = Math.max(proxy.peak, inFlight);
    res.on('close', () => (inFlight -= 1));
    const forward = request(
      { host: upstream.hostname, port: upstream.port, path, method: req.method, headers: req.headers },
      (answer) => {
        const pass = () => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        };
        if (proxy.delayMs > 0) setTimeout(pass, proxy.delayMs);
        else pass();
      },
    );
    forward.on('error', () => res.destroy());
    req.pipe(forward);
  });
  server.on('connection', (socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  const address = server.address();
  if (typeof address !== 'object' || !address) throw new Error('proxy has no address');
  Object.assign(proxy, { url: `http://127.0.0.1:${address.port}` });
  return proxy;
}

/**
 * A server in a separate process that accepts connections and never answers: a hung engine for callers
 * that block this process's event loop (the plv8 shim waits synchronously, like plv8 in libcurl).
 */
export async function startSilentServerProcess(): Promise<{ url: string; stop(): void }> {
  const { spawn } = await import('node:child_process');
  const child = spawn(
    process.execPath,
    ['-e', "const s=require('node:net').createServer(()=>{});s.listen(0,'127.0.0.1',()=>console.log(s.address().port))"],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<string>((done, fail) => {
    child.stdout.once('data', (chunk: Buffer) => done(chunk.toString().trim()));
    child.once('exit', () => fail(new Error('silent server exited')));
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGKILL') };
}
