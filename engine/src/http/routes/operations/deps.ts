// What the operations API needs from the rest of the engine; built once in main.ts (or a test).
import type { MaterialReader } from '../../../core/records.js';
import type { RuntimeAgent } from '../../../hub/runtime-agent.js';
import type { Resolver } from '../../outbound-target.js';
import type { CacheManager } from '../../../store/cache-manager.js';

export interface OperationsDeps {
  readonly agent: RuntimeAgent;
  readonly manager: CacheManager;
  /** Turns a key sync record's material into bytes (wrapped under the master key; raw only if allowed). */
  readonly readMaterial: MaterialReader;
  readonly engineVersion: string;
  /** Provider family reported by /runtime/info. */
  readonly providerFamily: string;
  readonly capabilities: readonly string[];
  /** Time limit of GET /stats/test-connection, in ms. */
  readonly statsTimeoutMs: number;
  /** How long a key version must have been RETIRED or DISABLED before POST /keys/destroy may erase it, in ms. */
  readonly keyDestroyGraceMs: number;
  /** The only stats targets (`host` or `host:port`) when set; otherwise any but link-local and metadata. */
  readonly statsAllowedTargets?: readonly string[];
  /** Name resolution for stats targets (the system's by default; tests substitute one). */
  readonly statsResolver?: Resolver;
}
