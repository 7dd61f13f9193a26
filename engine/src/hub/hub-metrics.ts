// Metrics of the engine's side of the hub, registered on the engine's registry: whether a hub snapshot
// is held back now, and how many were since start (docs/operations.md#held-back-snapshots).
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RuntimeAgent } from './runtime-agent.js';

export function registerHubMetrics(registry: Registry, agent: RuntimeAgent): void {
  new Gauge({
    name: 'svc_hub_snapshot_held_back',
    help: '1 while a hub snapshot that would retire all or most of the runtime waits for an operator',
    registers: [registry],
    collect() {
      this.set(agent.heldBack ? 1 : 0);
    },
  });
  new Counter({
    name: 'svc_hub_snapshots_held_back_total',
    help: 'Hub snapshots held back since start',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(agent.heldBackTotal);
    },
  });
}
