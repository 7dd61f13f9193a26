// The embedded store's own process: PGlite (a PostgreSQL compiled to WebAssembly) takes 150-250 MiB
// once open, which a sidecar should not carry while idle. The engine forks this process when it
// needs the store, sends it the SnapshotStore calls one at a time, and ends it when idle (see
// process-snapshot-store.ts). It holds the same SnapshotStore, so every write keeps its transaction.
import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import type { KeyRecord, PolicyRecord } from '../core/records.js';
import type { Logger } from './logger.js';
import { startPglite } from './pglite-start.js';
import type { SnapshotStore, StoreChange } from './snapshot-store.js';
import type { StoreReply, StoreRequest } from './store-protocol.js';

// PGlite's WebAssembly runs on V8's baseline compiler (Liftoff) first and is recompiled with the
// optimizing one (TurboFan) once a function has run enough (the tiering budget). Opening PGlite runs a
// lot of its code once, so with the default budget V8 spent about as much CPU optimizing it, on
// background threads, as on opening it, and this short-lived process never used most of that code
// again. A budget 100 times the default keeps the optimizing compiler for code that runs hot (a large
// snapshot's writes) and roughly halves the CPU an open takes (docs/operations.md, "Embedded store
// footprint"). It must be set before the module compiles, so before startPglite.
setFlagsFromString('--wasm-tiering-budget=180000000');

// PGlite starts on the directory when the engine's open arrives (never before: an engine that fails to
// start before sending it, a master key it cannot read say, leaves the directory untouched). The engine
// forks this process before it loads its own modules (main.ts), so this process has usually booted and
// loaded PGlite's module by the time the open arrives. The directory also comes as the first argument,
// which names the store in process listings.
const pgliteModule = import('@electric-sql/pglite');
pgliteModule.catch(() => undefined);
let started: ReturnType<typeof startPglite> | undefined;
let store: SnapshotStore | undefined;
/** Records staged for one saveChanges call (by its id), which gets them ahead of its own. */
let staged: { readonly id: number; readonly policies: PolicyRecord[]; readonly keys: KeyRecord[] } | undefined;

/** A saveChanges call's arguments with the records staged for it first (none if staged for another call). */
function withStaged(id: number, args: unknown[]): unknown[] {
  const part = staged?.id === id ? staged : undefined;
  staged = undefined;
  if (!part) return args;
  const [change, ...rest] = args as [StoreChange, ...unknown[]];
  return [{ ...change, policies: [...part.policies, ...change.policies], keys: [...part.keys, ...change.keys] }, ...rest];
}

/**
 * pino, loaded when this process first logs (it seldom does): loading it took about 50 ms of the
 * process's start, which is on the engine's warm start.
 */
function lazyLogger(level: string): Logger {
  let log: Logger | undefined;
  const get = (): Logger =>
    (log ??= (createRequire(import.meta.url)('pino') as typeof import('pino')).pino({
      level,
      base: { component: 'store-process' },
    }));
  return {
    debug: (fields, message) => get().debug(fields, message),
    info: (fields, message) => get().info(fields, message),
    warn: (fields, message) => get().warn(fields, message),
    error: (fields, message) => get().error(fields, message),
  };
}

function reply(message: StoreReply): void {
  process.send?.(message);
}

async function handle(request: StoreRequest): Promise<void> {
  if (request.method === 'stage') {
    if (staged?.id !== request.id) staged = { id: request.id, policies: [], keys: [] };
    for (const policy of request.policies) staged.policies.push(policy);
    for (const key of request.keys) staged.keys.push(key);
    return;
  }
  try {
    if (request.method === 'open') {
      const { pgliteDir, engineId, masterKey, logLevel } = request.args;
      if (started) throw new Error('the store process was opened already');
      started = startPglite(pgliteDir);
      started.catch(() => undefined);
      const [{ openDb }, { SnapshotStore }] = await Promise.all([import('./open-store.js'), import('./snapshot-store.js')]);
      store = new SnapshotStore(await openDb({ pgliteDir, started }, lazyLogger(logLevel)), engineId, masterKey);
      reply({ id: request.id, result: null });
      return;
    }
    if (!store) throw new Error('the store process was not opened');
    const target = store;
    const args = request.method === 'saveChanges' ? withStaged(request.id, request.args) : request.args;
    const result: unknown = await (target[request.method] as (...args: unknown[]) => Promise<unknown>).apply(target, args);
    reply({ id: request.id, result: result ?? null });
    if (request.method === 'close') process.disconnect();
  } catch (error) {
    const { name, message } = error instanceof Error ? error : new Error(String(error));
    reply({ id: request.id, error: { name, message } });
  }
}

// Calls arrive one at a time (the parent queues them); chaining keeps that order even if it did not.
let queue: Promise<void> = Promise.resolve();
process.on('message', (request: StoreRequest) => {
  queue = queue.then(() => handle(request));
});
// The engine went away (crash, SIGKILL, a start that failed): nothing is in flight that a restart would
// not redo. PGlite is closed cleanly even if it was still opening (it was started but not yet handed to
// the store), rather than ended while it may write.
process.on('disconnect', () => {
  void queue
    .then(() => (store ? store.close() : started?.then((client) => client.close())))
    .catch(() => undefined)
    .finally(() => process.exit(0));
});
