// NDJSON stream client: generates request lines on the fly (never holding the whole body), sends them
// to /api/encrypt/stream while reading the response concurrently, and counts response lines and
// successes. Memory in this process stays bounded by a few socket buffers, whatever the total size.
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { plaintexts } from './in-process.mjs';

const BLOCK_BYTES = 64 * 1024;
const SUCCESS = '"success":true';

/** A Readable of whole request lines totalling about `totalBytes`, from a few prebuilt blocks. */
function lineSource({ totalBytes, dataBytes, policyCode }) {
  const blocks = [];
  let linesPerBlock = 0;
  for (let b = 0; b < 4; b++) {
    const lines = [];
    let size = 0;
    for (const data of plaintexts(Math.max(1, Math.floor(BLOCK_BYTES / (dataBytes + 40))), dataBytes)) {
      const line = `${JSON.stringify({ data, policyCode })}\n`;
      lines.push(line);
      size += line.length;
    }
    blocks.push(Buffer.from(lines.join('')));
    linesPerBlock = lines.length;
    if (size === 0) throw new Error('empty block');
  }
  const count = Math.max(1, Math.round(totalBytes / blocks[0].length));
  let sent = 0;
  const source = new Readable({
    read() {
      while (sent < count) {
        const more = this.push(blocks[sent % blocks.length]);
        sent++;
        if (!more) return;
      }
      this.push(null);
    },
  });
  return { source, lines: count * linesPerBlock, bytes: count * blocks[0].length };
}

/**
 * Streams about `totalBytes` of encrypt request lines through one connection; resolves with the line
 * counts, bytes and seconds. Rejects on a non-200 status or on any response line that is not a success.
 */
export async function streamEncrypt({ origin, totalBytes, dataBytes, policyCode }) {
  const { source, lines, bytes } = lineSource({ totalBytes, dataBytes, policyCode });
  const start = process.hrtime.bigint();
  let received = 0;
  let linesOut = 0;
  let successes = 0;
  let firstFailure;

  const responded = new Promise((resolve, reject) => {
    const req = request(
      `${origin}/api/encrypt/stream`,
      { method: 'POST', headers: { 'content-type': 'application/x-ndjson' } },
      (res) => {
        res.setEncoding('latin1');
        let tail = '';
        res.on('data', (chunk) => {
          received += chunk.length;
          const text = tail + chunk;
          const end = text.lastIndexOf('\n') + 1;
          tail = text.slice(end);
          for (let i = text.indexOf('\n'); i !== -1 && i < end; i = text.indexOf('\n', i + 1)) linesOut++;
          for (let i = text.indexOf(SUCCESS); i !== -1 && i < end; i = text.indexOf(SUCCESS, i + 1)) successes++;
          if (firstFailure === undefined && successes !== linesOut) {
            firstFailure = text
              .slice(0, end)
              .split('\n')
              .find((l) => l !== '' && !l.includes(SUCCESS));
          }
        });
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`stream answered ${res.statusCode}: ${tail.slice(0, 300)}`));
          else resolve();
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    pipeline(source, req).catch(reject);
  });
  await responded;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (linesOut !== lines || successes !== lines) {
    throw new Error(
      `stream: sent ${lines} lines, got ${linesOut} back, ${successes} successes` +
        (firstFailure ? `; first failure: ${firstFailure.slice(0, 300)}` : ''),
    );
  }
  return { lines, bytes, received, seconds };
}
