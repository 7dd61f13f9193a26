// The JSON-lines audit file (SVC_AUDIT_FILE). Events are buffered in memory and written every
// flushIntervalMs or every maxBufferedEvents, whichever comes first; the file is fsynced every
// fsyncIntervalMs and at close. A process crash loses at most the unwritten buffer; a machine crash at
// most the writes since the last fsync (docs/audit.md). When the file cannot be opened or written, the
// sink reports itself unwritable (fail-closed refuses calls) and retries opening it every retryMs.
import { closeSync, fsync, fsyncSync, openSync, writeSync } from 'node:fs';
import type { AuditSink } from '../core/audit.js';

export interface FileSinkOptions {
  readonly flushIntervalMs: number;
  readonly fsyncIntervalMs: number;
  readonly maxBufferedEvents: number;
  /** How soon after a failure opening the file is tried again. */
  readonly retryMs: number;
}

export interface SinkLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export const DEFAULT_FILE_SINK_OPTIONS: FileSinkOptions = {
  flushIntervalMs: 200,
  fsyncIntervalMs: 1000,
  maxBufferedEvents: 1000,
  retryMs: 1000,
};

export class FileAuditSink implements AuditSink {
  readonly name = 'file';
  #fd: number | undefined;
  #buffer: string[] = [];
  #dirty = false;
  #lastAttempt = 0;
  #dropped = 0;
  #closed = false;
  /** The open failure was logged: retries (once per retryMs) stay quiet until the file opens again. */
  #openFailureLogged = false;
  readonly #timers: NodeJS.Timeout[] = [];

  constructor(
    readonly path: string,
    readonly options: FileSinkOptions,
    readonly log: SinkLog,
  ) {
    this.#open();
    this.#timers.push(setInterval(() => this.#write(), options.flushIntervalMs).unref());
    this.#timers.push(setInterval(() => this.#fsync(), options.fsyncIntervalMs).unref());
  }

  #open(): void {
    this.#lastAttempt = Date.now();
    try {
      // Owner-only: events name callers, policies and key versions.
      this.#fd = openSync(this.path, 'a', 0o600);
      this.#openFailureLogged = false;
      if (this.#dropped > 0) {
        this.log.warn({ file: this.path, dropped: this.#dropped }, 'audit file writable again; events were lost meanwhile');
        this.#dropped = 0;
      }
    } catch (error) {
      this.#fd = undefined;
      if (!this.#openFailureLogged) {
        this.#openFailureLogged = true;
        this.log.error(
          { file: this.path, code: (error as NodeJS.ErrnoException).code, retryMs: this.options.retryMs },
          'audit file cannot be opened; retrying',
        );
      }
    }
  }

  #fail(error: unknown, lost: number): void {
    this.#dropped += lost;
    this.log.error(
      { file: this.path, code: (error as NodeJS.ErrnoException).code, lost },
      'audit file cannot be written; events lost',
    );
    if (this.#fd !== undefined) {
      try {
        closeSync(this.#fd);
      } catch {
        // already unusable
      }
    }
    this.#fd = undefined;
    this.#lastAttempt = Date.now();
  }

  writable(): boolean {
    if (this.#fd === undefined && !this.#closed && Date.now() - this.#lastAttempt >= this.options.retryMs) this.#open();
    return this.#fd !== undefined;
  }

  write(line: string): void {
    if (!this.writable()) {
      this.#dropped++;
      return;
    }
    this.#buffer.push(line);
    if (this.#buffer.length >= this.options.maxBufferedEvents) this.#write();
  }

  /** Writes the buffer in one system call (a few KiB to the page cache: short enough to do in line). */
  #write(): void {
    if (this.#buffer.length === 0) return;
    const lines = this.#buffer;
    this.#buffer = [];
    if (this.#fd === undefined) {
      this.#dropped += lines.length;
      return;
    }
    const data = Buffer.from(lines.join(''), 'utf8');
    try {
      let offset = 0;
      while (offset < data.length) offset += writeSync(this.#fd, data, offset);
      this.#dirty = true;
    } catch (error) {
      this.#fail(error, lines.length);
    }
  }

  #fsync(): void {
    if (!this.#dirty || this.#fd === undefined) return;
    this.#dirty = false;
    const fd = this.#fd;
    fsync(fd, (error) => {
      if (error && this.#fd === fd) this.#fail(error, 0);
    });
  }

  async flush(): Promise<void> {
    this.#write();
    if (this.#fd === undefined || !this.#dirty) return;
    this.#dirty = false;
    try {
      fsyncSync(this.#fd);
    } catch (error) {
      this.#fail(error, 0);
    }
  }

  async close(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer);
    await this.flush();
    this.#closed = true;
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}
