// The embedded store's own process: PGlite (a PostgreSQL compiled to WebAssembly) takes 150-250 MiB
// once open, which a sidecar should not carry while idle. The engine forks this process when it
// needs the store, sends it the SnapshotStore calls one at a time, and ends it when idle (see
// process-snapshot-store.ts). It holds the same SnapshotStore, so every write keeps its transaction.
import { setFlagsFromString } from 'node:v8';
import { startPglite } from './pglite-start.js';
import type { SnapshotStore } from './snapshot-store.js';
import type { StoreReply, StoreRequest } from './store-protocol.js';

// PGlite's WebAssembly runs on V8's baseline compiler (Liftoff) first and is recompiled with the
// optimizing one (TurboFan) once a function has run enough (the tiering budget). Opening PGlite runs a
// lot of its code once, so with the default budget V8 spent about as much CPU optimizing it, on
// background threads, as on opening it, and this short-lived process never used most of that code
// again. A budget 100 times the default keeps the optimizing compiler for code that runs hot (a large
// snapshot's writes) and roughly halves the CPU an open takes (docs/operations.md, "Embedded store
// footprint"). It must be set before the module compiles, so before startPglite.
setFlagsFromString('--wasm-tiering-budget=180000000');

// The directory comes as the first argument so PGlite starts (and its WebAssembly compiles) while the
// rest of the store loads and before the engine's first message arrives.
const started = startPglite(process.argv[2]);
started.catch(() => undefined);
let store: SnapshotStore | undefined;

function reply(message: StoreReply): void {
  process.send?.(message);
}

async function handle(request: StoreRequest): Promise<void> {
  try {
    if (request.method === 'open') {
      const { pgliteDir, engineId, masterKey, logLevel } = request.args;
      const [{ pino }, { openDb }, { SnapshotStore }] = await Promise.all([
        import('pino'),
        import('./open-store.js'),
        import('./snapshot-store.js'),
      ]);
      const log = pino({ level: logLevel, base: { component: 'store-process' } });
      store = new SnapshotStore(await openDb({ pgliteDir, started }, log), engineId, masterKey);
      reply({ id: request.id, result: null });
      return;
    }
    if (!store) throw new Error('the store process was not opened');
    const target = store;
    const result: unknown = await (target[request.method] as (...args: unknown[]) => Promise<unknown>).apply(
      target,
      request.args,
    );
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
// The engine went away (crash, SIGKILL): nothing is in flight that a restart would not redo.
process.on('disconnect', () => {
  void queue.then(() => store?.close()).finally(() => process.exit(0));
});
