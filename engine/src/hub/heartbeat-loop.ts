// Runs the heartbeat on a timer: every interval while the hub answers; while it does not, retries with
// exponential backoff and jitter (so a fleet of engines does not hammer a recovering hub in step),
// which is also how an engine that started OFFLINE turns ONLINE by itself. Idle until registered.
import { EngineError } from '../core/errors.js';
import type { Logger } from '../store/logger.js';
import type { RuntimeAgent } from './runtime-agent.js';

export interface HeartbeatLoopOptions {
  /** Time between heartbeats while the hub answers (SVC_HUB_HEARTBEAT_INTERVAL_MS). */
  readonly intervalMs: number;
  /** Upper bound of the backoff while the hub is down (SVC_HUB_BACKOFF_MAX_MS). */
  readonly backoffMaxMs: number;
  /** Injected in tests; Math.random otherwise. */
  readonly random?: () => number;
}

/** Delay before the next attempt after `failures` consecutive failures: "equal jitter" backoff. */
export function backoffDelay(failures: number, options: HeartbeatLoopOptions): number {
  const random = options.random ?? Math.random;
  const base = Math.min(options.intervalMs, 1000);
  const ceiling = Math.min(options.backoffMaxMs, base * 2 ** Math.min(failures - 1, 30));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

export class HeartbeatLoop {
  #timer: NodeJS.Timeout | undefined;
  #failures = 0;
  #running = false;
  #beat: Promise<void> = Promise.resolve();

  constructor(
    readonly agent: RuntimeAgent,
    readonly options: HeartbeatLoopOptions,
    readonly log: Logger,
  ) {
    agent.onRegistered(() => this.wake());
  }

  /** Starts with an immediate heartbeat (so a reachable hub turns the engine ONLINE at once). */
  start(): void {
    this.#running = true;
    this.#schedule(0);
  }

  /** Beats now instead of waiting (after a registration). */
  wake(): void {
    if (this.#running) this.#schedule(0);
  }

  async stop(): Promise<void> {
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#beat;
  }

  #schedule(delay: number): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#beat = this.#tick();
    }, delay);
    this.#timer.unref();
  }

  async #tick(): Promise<void> {
    let delay = this.options.intervalMs;
    if (this.agent.identity) {
      try {
        await this.agent.heartbeat();
        this.#failures = 0;
      } catch (error) {
        const hubDown = error instanceof EngineError && error.code === 'HUB_FAILED' && this.agent.status === 'OFFLINE';
        if (hubDown) {
          this.#failures += 1;
          delay = backoffDelay(this.#failures, this.options);
          this.log.debug({ failures: this.#failures, retryInMs: delay }, 'heartbeat failed; backing off');
        } else {
          // The hub answered but its snapshot could not be applied (store outage, bad snapshot): keep the
          // interval; the next heartbeat offers the snapshot again since the runtime version did not move.
          this.#failures = 0;
        }
      }
    }
    if (this.#running && !this.#timer) this.#schedule(delay);
  }
}
