// The engine's side of the embedded store process (store-process.ts): the same calls as an
// in-process SnapshotStore, forwarded in order to a child process that is forked on the first call
// and ended after `idleCloseMs` without calls, so PGlite's memory is only held while the store works.
// A child that dies fails the calls in flight (the cache manager then treats the store as down and
// refuses changes); the next call forks a new one. A large change's records go ahead of its call in
// parts, each serialized in a slice of the event loop of its own (core/time-slices.ts).
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { recordParts } from '../core/runtime-snapshot.js';
import { nextSlice, sliceDue } from '../core/time-slices.js';
import { MasterKeyError } from './master-key.js';
import {
  type OpenArgs,
  type SnapshotStorePort,
  type StoreMethod,
  type StoreReply,
  type StoreRequest,
  StoreIntegrityError,
} from './store-protocol.js';

type Port = SnapshotStorePort;

/** Records per message: about a millisecond of serialization. */
const PART_RECORDS = 1000;

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

function revive(error: { name: string; message: string }): Error {
  if (error.name === 'MasterKeyError') return new MasterKeyError(error.message);
  if (error.name === 'StoreIntegrityError') return new StoreIntegrityError(error.message);
  return new Error(error.message);
}

// Under the test runner the sources are TypeScript: the child then needs the same loader.
const fromSource = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(fromSource ? './store-process.ts' : './store-process.js', import.meta.url));

/**
 * Forks a store process for `pgliteDir` ahead of the first call: it boots and loads PGlite while the
 * engine loads the rest of itself (warm start, main.ts), and touches the directory only once a
 * ProcessSnapshotStore given it sends the open. A process that is never handed over ends with the
 * engine (it ends when its IPC channel closes).
 */
export function forkStoreProcess(pgliteDir: string): ChildProcess {
  return fork(ENTRY, [pgliteDir], {
    execArgv: fromSource ? ['--import', 'tsx'] : [],
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

export class ProcessSnapshotStore implements Port {
  readonly driver = 'pglite' as const;
  readonly location: string;
  #child: ChildProcess | undefined;
  /** The child the open was sent to (the open goes with the first call to each child). */
  #opened: ChildProcess | undefined;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  #queue: Promise<unknown> = Promise.resolve();
  #idleTimer: NodeJS.Timeout | undefined;

  /** `preforked`: a process forkStoreProcess started for the same directory, used for the first call. */
  constructor(
    readonly open: OpenArgs,
    readonly idleCloseMs: number,
    preforked?: ChildProcess,
  ) {
    this.location = open.pgliteDir;
    // One that already ended (its exitCode or signalCode is set before its 'exit' event) is left: the
    // first call forks another.
    if (preforked && preforked.exitCode === null && preforked.signalCode === null) this.#child = this.#adopt(preforked);
  }

  /** The store process's pid while one runs (for /runtime/info-style reporting and tests). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  load: Port['load'] = () => this.#call('load', []);
  saveChanges: Port['saveChanges'] = (...args) => this.#call('saveChanges', args);
  saveSnapshot: Port['saveSnapshot'] = (...args) => this.#call('saveSnapshot', args);
  saveIdentity: Port['saveIdentity'] = (...args) => this.#call('saveIdentity', args);
  saveUsage: Port['saveUsage'] = (...args) => this.#call('saveUsage', args);
  saveState: Port['saveState'] = (...args) => this.#call('saveState', args);
  ping: Port['ping'] = () => this.#call('ping', []);

  /** Ends the store process (PGlite closed cleanly) if one runs. */
  close: Port['close'] = () => this.#serial(() => this.#stop());

  #call<T>(method: StoreMethod, args: unknown[]): Promise<T> {
    return this.#serial(async () => {
      const child = (this.#child ??= this.#adopt(forkStoreProcess(this.open.pgliteDir)));
      if (this.#opened === child) return (await this.#request(child, method, args)) as T;
      // Open and the call go out together (the child handles them in order), so a start does not
      // wait for the engine's event loop between them; an open that fails is the error reported.
      this.#opened = child;
      const opened = this.#send(child, this.#nextId++, 'open', this.open);
      const result = this.#request(child, method, args);
      result.catch(() => undefined);
      await opened;
      return (await result) as T;
    });
  }

  #serial<T>(task: () => Promise<T>): Promise<T> {
    clearTimeout(this.#idleTimer);
    const run = this.#queue.then(task, task);
    this.#queue = run.catch(() => undefined);
    void this.#queue.then(() => {
      if (this.#child && this.#pending.size === 0) {
        clearTimeout(this.#idleTimer);
        this.#idleTimer = setTimeout(() => void this.close(), this.idleCloseMs);
        this.#idleTimer.unref();
      }
    });
    return run;
  }

  async #stop(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    await this.#send(child, this.#nextId++, 'close', []).catch(() => child.kill());
    await exited;
  }

  /** Sends one call: a saveChanges with many records stages all but the last part of them first. */
  async #request(child: ChildProcess, method: StoreMethod, args: unknown[]): Promise<unknown> {
    const id = this.#nextId++;
    if (method !== 'saveChanges') return this.#send(child, id, method, args);
    const [change, ...others] = args as Parameters<Port['saveChanges']>;
    const { ahead, rest } = recordParts(change, PART_RECORDS);
    for (const part of ahead) {
      const stage: StoreRequest = { id, method: 'stage', ...part };
      // A part that cannot be sent fails the call itself, whose own message cannot be sent either.
      child.send(stage, () => undefined);
      if (sliceDue()) await nextSlice();
    }
    return this.#send(child, id, method, [{ ...change, ...rest }, ...others]);
  }

  #send(child: ChildProcess, id: number, method: StoreMethod | 'open', args: unknown): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      child.send({ id, method, args }, (error) => {
        if (error) {
          this.#pending.delete(id);
          reject(error);
        }
      });
    });
  }

  #adopt(child: ChildProcess): ChildProcess {
    child.on('message', (reply: StoreReply) => {
      const pending = this.#pending.get(reply.id);
      if (!pending) return;
      this.#pending.delete(reply.id);
      if ('error' in reply) pending.reject(revive(reply.error));
      else pending.resolve(reply.result);
    });
    child.once('exit', (code, signal) => {
      if (this.#child === child) this.#child = undefined;
      const error = new Error(`the embedded store process ended (${signal ?? `exit code ${code}`})`);
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    });
    return child;
  }
}
