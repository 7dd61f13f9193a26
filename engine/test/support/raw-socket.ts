// Raw TCP exchanges with a listening app, for what an HTTP client library would refuse to send.
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';

/** Sends raw bytes on a new connection and returns everything the server answers until it closes. */
export async function rawExchange(port: number, send: (socket: Socket) => void): Promise<string> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  send(socket);
  await once(socket, 'close');
  return Buffer.concat(chunks).toString('latin1');
}
