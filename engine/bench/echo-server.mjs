// The transport floor of the wire endpoint's round trip: a plain TCP server that answers every
// newline-terminated request line with one fixed line the size of a ciphertext answer, no parsing
// beyond finding the newline. Run as its own process; prints "listening <port>" when ready.
import { createServer } from 'node:net';

const answer = Buffer.from(`${'x'.repeat(90)}\n`);
const server = createServer({ noDelay: true }, (socket) => {
  socket.on('error', () => socket.destroy());
  socket.on('data', (chunk) => {
    // One request in flight per connection (serial round trips): each chunk ending a line gets one answer.
    if (chunk[chunk.length - 1] === 0x0a) socket.write(answer);
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
