// The engine's configuration: one typed object parsed from the environment and the command line.
// Every setting has a safe default; an invalid value stops start-up with a message naming it.
import { resolve } from 'node:path';

export interface Limits {
  /** Largest JSON or binary-frame request body, in bytes. */
  readonly bodyLimitBytes: number;
  /** Items in one batch request (JSON or binary frame). */
  readonly maxBatchItems: number;
  /** Bytes of one item's data (plaintext on encrypt, ciphertext on decrypt). */
  readonly maxDataBytes: number;
  /** Bytes of one NDJSON stream line. */
  readonly maxStreamLineBytes: number;
  /** Longest time a client may take to send one request (a stream included), in ms. */
  readonly requestTimeoutMs: number;
  /** A connection idle for this long is closed, in ms. */
  readonly idleTimeoutMs: number;
}

export interface EngineConfig {
  readonly host: string;
  readonly port: number;
  readonly dataDir: string;
  readonly devMode: boolean;
  readonly bootstrapFile?: string;
  readonly logLevel: string;
  /** How long a graceful shutdown waits for in-flight requests and streams before closing them. */
  readonly shutdownGraceMs: number;
  readonly limits: Limits;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

type Env = Record<string, string | undefined>;

function integer(env: Env, name: string, fallback: number, min = 1): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return value;
}

function flag(env: Env, name: string): boolean {
  const raw = (env[name] ?? '').toLowerCase();
  if (raw === '' || raw === 'false' || raw === '0') return false;
  if (raw === 'true' || raw === '1') return true;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

const MIB = 1024 * 1024;

export function loadConfig(env: Env = process.env, argv: readonly string[] = process.argv.slice(2)): EngineConfig {
  for (const arg of argv) {
    if (arg !== '--dev')
      throw new ConfigError(`unknown argument "${arg}" (the only flag is --dev; settings come from SVC_* variables)`);
  }
  const port = integer(env, 'SVC_PORT', 8080, 0);
  if (port > 65535) throw new ConfigError(`SVC_PORT must be at most 65535, got "${env.SVC_PORT}"`);
  const level = env.SVC_LOG_LEVEL ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(level)) {
    throw new ConfigError(
      `SVC_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "${level}"`,
    );
  }
  return {
    // Loopback by default: the engine is a sidecar; expose it deliberately (0.0.0.0 in containers).
    host: env.SVC_HOST || '127.0.0.1',
    port,
    // Where the embedded store and dev-mode material live.
    dataDir: resolve(env.SVC_DATA_DIR || 'data'),
    // Dev mode creates demo policies with generated keys; never for production.
    devMode: argv.includes('--dev') || flag(env, 'SVC_DEV_MODE'),
    // A JSON file of policies and keys to serve without a hub (docs/bootstrap.md).
    bootstrapFile: env.SVC_BOOTSTRAP_FILE ? resolve(env.SVC_BOOTSTRAP_FILE) : undefined,
    logLevel: level,
    shutdownGraceMs: integer(env, 'SVC_SHUTDOWN_GRACE_MS', 10_000),
    limits: {
      bodyLimitBytes: integer(env, 'SVC_BODY_LIMIT_BYTES', 32 * MIB),
      maxBatchItems: integer(env, 'SVC_BATCH_MAX_ITEMS', 10_000),
      maxDataBytes: integer(env, 'SVC_DATA_MAX_BYTES', 4 * MIB),
      maxStreamLineBytes: integer(env, 'SVC_STREAM_LINE_MAX_BYTES', 8 * MIB),
      requestTimeoutMs: integer(env, 'SVC_REQUEST_TIMEOUT_MS', 3_600_000),
      idleTimeoutMs: integer(env, 'SVC_IDLE_TIMEOUT_MS', 60_000),
    },
  };
}
