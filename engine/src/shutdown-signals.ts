// SIGTERM and SIGINT, caught from the engine's first moment (main.ts) and handed to serve.ts's drain.
/**
 * Signals are caught from the first moment (main.ts): one that arrives while the engine starts is held
 * and acted on once it can drain and close the store cleanly, instead of ending the process with the
 * store half-written. A second one during start ends the process at once (a start that hangs can
 * still be stopped).
 */
export class ShutdownSignals {
  #received: string | undefined;
  #handler: ((signal: string) => void) | undefined;

  constructor(readonly exit: (code: number) => void = (code) => process.exit(code)) {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.on(signal, () => {
        if (this.#handler) this.#handler(signal);
        else if (this.#received === undefined) this.#received = signal;
        else this.exit(signal === 'SIGINT' ? 130 : 143);
      });
    }
  }

  /** From now on signals call `handler`; one received before is handled at once. */
  handle(handler: (signal: string) => void): void {
    this.#handler = handler;
    if (this.#received !== undefined) handler(this.#received);
  }
}
