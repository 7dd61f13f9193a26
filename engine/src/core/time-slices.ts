// Long work on the main thread without holding the event loop: work over a large runtime (a sync's
// records, a snapshot's indexes, a body's JSON) is written once, as a generator that yields where it may
// pause, and run either at once (runNow: worker threads, tests, small inputs) or in slices (runInSlices),
// which hands the loop back to other requests whenever SLICE_MS of work went by without a pause.
// The budget is one for the whole thread, not one per step: steps that follow one another (parse,
// validate, merge, index) do not each start a fresh slice and add up between two turns of the loop.

/** The longest stretch (ms) of sliced work between two turns of the event loop. */
const SLICE_MS = 8;

/** Work that may pause at each `yield` and returns T. */
export type Sliced<T> = Generator<void, T, void>;

let sliceStart = performance.now();

/** Whether the current slice is used up: sliced work then awaits nextSlice(). */
export function sliceDue(): boolean {
  return performance.now() - sliceStart >= SLICE_MS;
}

/** Hands the event loop back (other connections' I/O and timers run) and starts a new slice. */
export function nextSlice(): Promise<void> {
  return new Promise((resolve) =>
    setImmediate(() => {
      sliceStart = performance.now();
      resolve();
    }),
  );
}

/** Runs sliced work to the end without pausing. */
export function runNow<T>(work: Sliced<T>): T {
  for (;;) {
    const step = work.next();
    if (step.done) return step.value;
  }
}

/**
 * Runs sliced work, pausing at its yields whenever the slice is used up; also before its first step,
 * unless a slice started just now: the turn that starts it may have done much already (receiving a
 * large body, say).
 */
export async function runInSlices<T>(work: Sliced<T>): Promise<T> {
  if (sliceDue()) await nextSlice();
  for (;;) {
    const step = work.next();
    if (step.done) return step.value;
    if (sliceDue()) await nextSlice();
  }
}

/** `map` over items as sliced work (a pause point after each item). */
export function* mapSliced<T, U>(items: readonly T[], map: (item: T, index: number) => U): Sliced<U[]> {
  const out = new Array<U>(items.length);
  for (let i = 0; i < items.length; i++) {
    out[i] = map(items[i] as T, i);
    yield;
  }
  return out;
}
