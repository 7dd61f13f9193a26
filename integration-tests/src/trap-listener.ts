// A TCP listener standing in for an attacker's server in the tests that prove the engine address belongs
// to the DBA: it records every connection and byte, and the tests expect none.
import { createServer, type Server, type Socket } from 'node:net';

export interface TrapListener {
  readonly port: number;
  connections(): number;
  bytes(): number;
  close(): Promise<void>;
}

export async function startTrap(): Promise<TrapListener> {
  let connections = 0;
  let bytes = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('data', (chunk) => {
      bytes += chunk.length;
    });
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    connections: () => connections,
    bytes: () => bytes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
