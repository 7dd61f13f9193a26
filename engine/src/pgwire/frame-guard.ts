// A byte-counting filter in front of pg-gateway: pg-gateway buffers a message until it is complete,
// whatever length its header claims, so a client could make the engine buffer gigabytes. The guard
// reads only message headers and stops a connection whose next message is over the limit before its
// body is buffered. Before start-up it also settles the requests pg-gateway does not know (GSSAPI
// encryption: declined; a cancel request: dropped), so pg-gateway only ever sees what it handles.

/** Start-up packets are small; PostgreSQL refuses longer ones too (MAX_STARTUP_PACKET_LENGTH). */
export const MAX_STARTUP_BYTES = 10_000;
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3_0 = 196608;

export interface GuardEvents {
  /** A protocol violation or a message over the limit: answer FATAL with this SQLSTATE and close. */
  fail(code: string, message: string): void;
  /** Bytes the guard answers itself (the `N` that declines GSSAPI encryption). */
  reply(bytes: Uint8Array): void;
  /** A cancel request arrived: nothing to cancel (commands are not interruptible); close. */
  cancel(): void;
}

export interface GuardOptions {
  readonly maxMessageBytes: number;
  /** After an SSLRequest the bytes are TLS: the guard steps aside (a new guard runs on the plaintext). */
  readonly tls: boolean;
}

type Phase = 'startup' | 'typed' | 'passthrough' | 'stopped';

/** Passes each chunk the client sends to `forward`, unchanged, while the bytes stay within the rules. */
export type FrameGuard = (chunk: Uint8Array, forward: (bytes: Uint8Array) => void) => void;

export function frameGuard(options: GuardOptions, events: GuardEvents): FrameGuard {
  let phase: Phase = 'startup';
  // Start-up phase: the packet so far (it is short). Typed phase: header bytes so far, body bytes left.
  let pending = Buffer.alloc(0);
  let header = Buffer.alloc(0);
  let bodyLeft = 0;

  const stop = (code: string, message: string) => {
    phase = 'stopped';
    events.fail(code, message);
  };

  const startup = (chunk: Uint8Array, forward: (bytes: Uint8Array) => void): Uint8Array | undefined => {
    pending = pending.length === 0 ? Buffer.from(chunk) : Buffer.concat([pending, chunk]);
    while (phase === 'startup' && pending.length >= 8) {
      const length = pending.readInt32BE(0);
      if (length < 8 || length > MAX_STARTUP_BYTES) {
        stop('08P01', 'invalid length of startup packet');
        return undefined;
      }
      if (pending.length < length) return undefined;
      const code = pending.readInt32BE(4);
      const packet = pending.subarray(0, length);
      pending = pending.subarray(length);
      if (code === GSSENC_REQUEST) {
        events.reply(Buffer.from('N'));
      } else if (code === CANCEL_REQUEST) {
        phase = 'stopped';
        events.cancel();
        return undefined;
      } else if (code === SSL_REQUEST) {
        forward(packet);
        if (options.tls) phase = 'passthrough';
      } else if (code === PROTOCOL_3_0) {
        forward(packet);
        phase = 'typed';
      } else {
        stop('0A000', `unsupported frontend protocol ${code >>> 16}.${code & 0xffff}: the engine speaks 3.0`);
        return undefined;
      }
    }
    if (phase === 'startup') return undefined;
    const rest = pending;
    pending = Buffer.alloc(0);
    return rest.length > 0 ? rest : undefined;
  };

  const typed = (chunk: Uint8Array, forward: (bytes: Uint8Array) => void) => {
    let offset = 0;
    const from = 0;
    // Where the current header began in this chunk (0 when it began in an earlier one).
    let headerStart = 0;
    while (offset < chunk.length) {
      if (bodyLeft > 0) {
        const take = Math.min(bodyLeft, chunk.length - offset);
        bodyLeft -= take;
        offset += take;
        continue;
      }
      if (header.length === 0) headerStart = offset;
      const need = 5 - header.length;
      const take = Math.min(need, chunk.length - offset);
      header = Buffer.concat([header, chunk.subarray(offset, offset + take)]);
      offset += take;
      if (header.length < 5) break;
      const length = header.readInt32BE(1);
      header = Buffer.alloc(0);
      if (length < 4) {
        stop('08P01', 'invalid message length');
        return;
      }
      if (length + 1 > options.maxMessageBytes) {
        // Forward nothing of this message: pg-gateway must not start buffering it.
        if (headerStart > from) forward(chunk.subarray(from, headerStart));
        stop('54000', `message exceeds ${options.maxMessageBytes} bytes`);
        return;
      }
      bodyLeft = length - 4;
    }
    if (offset > from) forward(chunk.subarray(from, offset));
  };

  return (chunk, forward) => {
    if (phase === 'stopped') return;
    if (phase === 'passthrough') {
      forward(chunk);
      return;
    }
    if (phase === 'startup') {
      const rest = startup(chunk, forward);
      if (rest === undefined) return;
      if ((phase as Phase) === 'passthrough') {
        forward(rest);
        return;
      }
      typed(rest, forward);
      return;
    }
    typed(chunk, forward);
  };
}

/**
 * Cuts the guarded byte stream of an authenticated session into whole messages (type byte, length,
 * body). Lengths were checked by the guard, so the parts of a message are joined once, when complete.
 */
export function messageAssembler(onMessage: (message: Buffer) => void): (bytes: Uint8Array) => void {
  const parts: Buffer[] = [];
  let buffered = 0;
  let needed = 0; // total length of the message being collected, once its header is known
  return (bytes) => {
    parts.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    buffered += bytes.byteLength;
    for (;;) {
      if (needed === 0) {
        if (buffered < 5) return;
        const head = parts[0] as Buffer;
        const header = head.length >= 5 ? head : Buffer.concat(parts, 5);
        needed = 1 + header.readInt32BE(1);
      }
      if (buffered < needed) return;
      const all = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, buffered);
      const message = all.subarray(0, needed);
      const rest = all.subarray(needed);
      parts.length = 0;
      buffered = rest.length;
      if (buffered > 0) parts.push(rest);
      needed = 0;
      onMessage(message);
    }
  };
}
