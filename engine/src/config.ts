// The engine's configuration: one typed object parsed from the environment and the command line.
// Every setting has a safe default; an invalid value stops start-up with a message naming it.
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';

export interface Limits {
  /** Largest JSON or binary-frame request body, in bytes. */
  readonly bodyLimitBytes: number;
  /** Items in one batch request (JSON or binary frame). */
  readonly maxBatchItems: number;
  /** Bytes of one item's data (plaintext on encrypt, ciphertext on decrypt). */
  readonly maxDataBytes: number;
  /** Bytes of one NDJSON stream line. */
  readonly maxStreamLineBytes: number;
  /** Longest time a client may take to send one request body (single, batch; streams below), in ms. */
  readonly requestTimeoutMs: number;
  /** A connection idle for this long is closed, in ms. */
  readonly idleTimeoutMs: number;
  /** A stream whose connection moves no byte (either direction) for this long is ended, in ms. */
  readonly streamIdleTimeoutMs: number;
  /** Longest time one NDJSON stream may last, in ms. */
  readonly streamTimeoutMs: number;
  /** Open connections per listener; connections beyond it are closed at accept. */
  readonly maxConnections: number;
  /** Deepest nesting of arrays and objects in a JSON body or stream line. */
  readonly maxJsonDepth: number;
  /** Values (keys included) in one JSON body or stream line. */
  readonly maxJsonValues: number;
}

export interface EngineConfig {
  readonly host: string;
  readonly port: number;
  readonly dataDir: string;
  readonly devMode: boolean;
  readonly bootstrapFile?: string;
  readonly logLevel: string;
  /** Crypto worker threads for large batches (SVC_WORKERS, default the available cores); 1: none, all on the main thread. */
  readonly workers: number;
  /** SVC_TEST_HOOKS: SIGUSR2 ends one crypto worker abruptly, as a crash would (tests only, docs/workers.md). */
  readonly testHooks: boolean;
  /** How long a graceful shutdown waits for in-flight requests and streams before closing them. */
  readonly shutdownGraceMs: number;
  readonly limits: Limits;
  readonly store: StoreConfig;
  readonly hub: HubConfig;
  /**
   * The operations API's own listener (loopback, port 8081 by default); absent only when the operator
   * chose to share the execution listener (SVC_OPS_SHARED=true).
   */
  readonly operationsListener?: { readonly host: string; readonly port: number };
  readonly audit: AuditConfig;
  /** Who may register this engine's runtime identity (docs/operations.md#registration). */
  readonly registration: RegistrationConfig;
  /** Time a key version must have been RETIRED or DISABLED before it may be destroyed, in ms (SVC_KEY_DESTROY_GRACE_HOURS). */
  readonly keyDestroyGraceMs: number;
  /** The PostgreSQL wire endpoint (docs/pgwire.md); absent: off. */
  readonly pgwire?: PgWireConfig;
}

/** The PostgreSQL wire endpoint's listener and its one user (docs/pgwire.md). */
export interface PgWireConfig {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  /** SVC_PG_PASSWORD; never logged. Exactly one of password and passwordFile is set. */
  readonly password?: string;
  /** SVC_PG_PASSWORD_FILE: a file holding the password (read at start). */
  readonly passwordFile?: string;
  /** PEM certificate chain and key (SVC_PG_TLS_CERT_FILE, SVC_PG_TLS_KEY_FILE); both or neither. */
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
  readonly maxConnections: number;
  readonly idleTimeoutMs: number;
}

/** The audit trail (docs/audit.md). */
export interface AuditConfig {
  /** JSON-lines file (SVC_AUDIT_FILE); default <dataDir>/audit.log; absent when set to `off`. */
  readonly file?: string;
  /** Also write events to stdout (SVC_AUDIT_STDOUT). */
  readonly stdout: boolean;
  /** Refuse calls with 503 while no sink can be written (SVC_AUDIT_FAIL_CLOSED). */
  readonly failClosed: boolean;
  /** Buffered events are written at least this often, in ms (SVC_AUDIT_FLUSH_INTERVAL_MS). */
  readonly flushIntervalMs: number;
  /** The file is fsynced at least this often, in ms (SVC_AUDIT_FSYNC_INTERVAL_MS). */
  readonly fsyncIntervalMs: number;
}

export interface RegistrationConfig {
  /** SVC_HUB_URL: the only hub this engine may be registered with; absent: any hub (first come). */
  readonly hubUrl?: string;
  /** SVC_REGISTRATION_TOKEN: the first registration must present it; never logged. */
  readonly token?: string;
  /** SVC_REGISTRATION_TOKEN_FILE: a file holding the token (read at start). */
  readonly tokenFile?: string;
}

export interface StoreConfig {
  /** PostgreSQL URL of the snapshot store (DATABASE_URL); absent: embedded PGlite in <dataDir>/store. */
  readonly databaseUrl?: string;
  /** Scopes this engine's rows in a store several engines share (SVC_ENGINE_ID). */
  readonly engineId: string;
  /** Base64 master key (SVC_MASTER_KEY); never logged. */
  readonly masterKey?: string;
  /** File holding the master key (SVC_MASTER_KEY_FILE). */
  readonly masterKeyFile?: string;
  /** Accept raw (unwrapped) key material in key syncs (SVC_ALLOW_RAW_KEY_MATERIAL); development only. */
  readonly allowRawKeyMaterial: boolean;
  /** Connection and query time limit on PostgreSQL, in ms (SVC_STORE_TIMEOUT_MS). */
  readonly timeoutMs: number;
  /** How often usage counters and heartbeat times are written, in ms (SVC_STORE_FLUSH_INTERVAL_MS). */
  readonly flushIntervalMs: number;
  /** The embedded store's process ends after this long without a call, in ms (SVC_STORE_IDLE_CLOSE_MS). */
  readonly idleCloseMs: number;
}

export interface HubConfig {
  /** Time between heartbeats while the hub answers, in ms (SVC_HUB_HEARTBEAT_INTERVAL_MS). */
  readonly heartbeatIntervalMs: number;
  /** Longest wait between attempts while the hub is down, in ms (SVC_HUB_BACKOFF_MAX_MS). */
  readonly backoffMaxMs: number;
  /** Time limit of one call to the hub, in ms (SVC_HUB_TIMEOUT_MS). */
  readonly timeoutMs: number;
  /** Time limit of GET /stats/test-connection, in ms (SVC_STATS_TIMEOUT_MS). */
  readonly statsTimeoutMs: number;
  /** The only targets GET /stats/test-connection may call, `host` or `host:port` (SVC_STATS_ALLOWED_TARGETS). */
  readonly statsAllowedTargets?: readonly string[];
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

function databaseUrl(env: Env): string | undefined {
  const raw = env.DATABASE_URL;
  if (raw === undefined || raw === '') return undefined;
  let protocol = '';
  try {
    protocol = new URL(raw).protocol;
  } catch {
    // Never echo the value: it usually carries a password.
    throw new ConfigError('DATABASE_URL must be a postgres:// or postgresql:// URL');
  }
  if (protocol !== 'postgres:' && protocol !== 'postgresql:') {
    throw new ConfigError('DATABASE_URL must be a postgres:// or postgresql:// URL');
  }
  return raw;
}

export const DEFAULT_OPS_PORT = 8081;

function operationsListener(env: Env, executionPort: number): EngineConfig['operationsListener'] {
  if (flag(env, 'SVC_OPS_SHARED')) {
    // Sharing is an explicit, risky choice: the first registration needs no header (docs/operations.md).
    if (env.SVC_OPS_PORT || env.SVC_OPS_HOST) {
      throw new ConfigError('SVC_OPS_SHARED=true serves the operations API on the execution listener: unset SVC_OPS_HOST and SVC_OPS_PORT');
    }
    return undefined;
  }
  const port = integer(env, 'SVC_OPS_PORT', DEFAULT_OPS_PORT, 0);
  if (port > 65535) throw new ConfigError(`SVC_OPS_PORT must be at most 65535, got "${env.SVC_OPS_PORT}"`);
  if (port !== 0 && port === executionPort) {
    throw new ConfigError(
      `SVC_OPS_PORT (${port}) equals SVC_PORT: give the operations API its own port, or set SVC_OPS_SHARED=true to share the execution listener`,
    );
  }
  // Loopback unless told otherwise, even when the execution API listens on all interfaces.
  return { host: env.SVC_OPS_HOST || '127.0.0.1', port };
}

function auditConfig(env: Env, dataDir: string): AuditConfig {
  const raw = env.SVC_AUDIT_FILE;
  // On by default: every call is recorded unless an operator turns it off explicitly.
  const file = raw === 'off' ? undefined : resolve(raw ? raw : join(dataDir, 'audit.log'));
  const stdout = flag(env, 'SVC_AUDIT_STDOUT');
  const failClosed = flag(env, 'SVC_AUDIT_FAIL_CLOSED');
  if (failClosed && file === undefined && !stdout) {
    throw new ConfigError('SVC_AUDIT_FAIL_CLOSED=true needs an audit sink (SVC_AUDIT_FILE or SVC_AUDIT_STDOUT)');
  }
  return {
    file,
    stdout,
    failClosed,
    flushIntervalMs: integer(env, 'SVC_AUDIT_FLUSH_INTERVAL_MS', 200),
    fsyncIntervalMs: integer(env, 'SVC_AUDIT_FSYNC_INTERVAL_MS', 1000),
  };
}

export const DEV_PG_PORT = 5433;
export const DEV_PG_USER = 'svc';
/** Documented in docs/pgwire.md; only ever used in dev mode. */
export const DEV_PG_PASSWORD = 'svc-dev';

function pgwire(env: Env, devMode: boolean): PgWireConfig | undefined {
  if (!devMode && (env.SVC_PG_PORT === undefined || env.SVC_PG_PORT === '')) return undefined;
  const port = integer(env, 'SVC_PG_PORT', DEV_PG_PORT, 0);
  if (port > 65535) throw new ConfigError(`SVC_PG_PORT must be at most 65535, got "${env.SVC_PG_PORT}"`);
  const password = env.SVC_PG_PASSWORD || undefined;
  const passwordFile = env.SVC_PG_PASSWORD_FILE ? resolve(env.SVC_PG_PASSWORD_FILE) : undefined;
  if (password !== undefined && passwordFile !== undefined) {
    throw new ConfigError('set only one of SVC_PG_PASSWORD and SVC_PG_PASSWORD_FILE');
  }
  // No default password outside dev mode: an open wire endpoint would encrypt and decrypt for anyone.
  if (!devMode && password === undefined && passwordFile === undefined) {
    throw new ConfigError('SVC_PG_PORT is set: SVC_PG_PASSWORD or SVC_PG_PASSWORD_FILE is required (there is no default password)');
  }
  const certFile = env.SVC_PG_TLS_CERT_FILE || undefined;
  const keyFile = env.SVC_PG_TLS_KEY_FILE || undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new ConfigError('set both SVC_PG_TLS_CERT_FILE and SVC_PG_TLS_KEY_FILE, or neither');
  }
  return {
    host: env.SVC_PG_HOST || '127.0.0.1',
    port,
    user: env.SVC_PG_USER || DEV_PG_USER,
    password: password ?? (passwordFile === undefined ? DEV_PG_PASSWORD : undefined),
    passwordFile,
    tls: certFile && keyFile ? { certFile: resolve(certFile), keyFile: resolve(keyFile) } : undefined,
    maxConnections: integer(env, 'SVC_PG_MAX_CONNECTIONS', 64),
    idleTimeoutMs: integer(env, 'SVC_PG_IDLE_TIMEOUT_MS', 600_000),
  };
}

function registration(env: Env): RegistrationConfig {
  let hubUrl: string | undefined;
  if (env.SVC_HUB_URL) {
    let url: URL | undefined;
    try {
      url = new URL(env.SVC_HUB_URL);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password || url.search || url.hash) {
      throw new ConfigError('SVC_HUB_URL must be an absolute http or https URL without credentials, query or fragment');
    }
    // The same normalization registration applies to hubUrl, so the two compare as equal.
    hubUrl = url.toString().replace(/\/+$/, '');
  }
  const token = env.SVC_REGISTRATION_TOKEN || undefined;
  const tokenFile = env.SVC_REGISTRATION_TOKEN_FILE ? resolve(env.SVC_REGISTRATION_TOKEN_FILE) : undefined;
  if (token !== undefined && tokenFile !== undefined) {
    throw new ConfigError('set only one of SVC_REGISTRATION_TOKEN and SVC_REGISTRATION_TOKEN_FILE');
  }
  // Never echo the token itself.
  if (token !== undefined && token.length < 16) throw new ConfigError('SVC_REGISTRATION_TOKEN must be at least 16 characters');
  return { hubUrl, token, tokenFile };
}

// Limits of the HTTP transports (docs/api.md#limits). Defaults keep one engine answering under slow or
// hostile clients: a body must arrive within 90 s, a stream must keep moving, connections are capped
// below common file descriptor limits, and JSON documents cannot allocate millions of values.
function limits(env: Env): Limits {
  const maxBatchItems = integer(env, 'SVC_BATCH_MAX_ITEMS', 10_000);
  return {
    bodyLimitBytes: integer(env, 'SVC_BODY_LIMIT_BYTES', 32 * MIB),
    maxBatchItems,
    maxDataBytes: integer(env, 'SVC_DATA_MAX_BYTES', 4 * MIB),
    maxStreamLineBytes: integer(env, 'SVC_STREAM_LINE_MAX_BYTES', 8 * MIB),
    requestTimeoutMs: integer(env, 'SVC_REQUEST_TIMEOUT_MS', 90_000),
    idleTimeoutMs: integer(env, 'SVC_IDLE_TIMEOUT_MS', 60_000),
    streamIdleTimeoutMs: integer(env, 'SVC_STREAM_IDLE_TIMEOUT_MS', 30_000),
    streamTimeoutMs: integer(env, 'SVC_STREAM_TIMEOUT_MS', 3_600_000),
    maxConnections: integer(env, 'SVC_MAX_CONNECTIONS', 2_000),
    maxJsonDepth: integer(env, 'SVC_JSON_MAX_DEPTH', 32),
    // A batch item is at most nine values ({, four keys, four values): room for the largest batch.
    maxJsonValues: integer(env, 'SVC_JSON_MAX_VALUES', Math.max(1_000, 20 * maxBatchItems)),
  };
}

// Comma-separated `host` or `host:port` entries; unset: any target but link-local and metadata addresses.
function statsAllowedTargets(env: Env): string[] | undefined {
  const raw = env.SVC_STATS_ALLOWED_TARGETS;
  if (raw === undefined || raw.trim() === '') return undefined;
  return raw.split(',').map((entry) => {
    const trimmed = entry.trim();
    let url: URL | undefined;
    try {
      url = new URL(`http://${trimmed}`);
    } catch {
      url = undefined;
    }
    if (!trimmed || !url || /[/@?#\s]/.test(trimmed)) {
      throw new ConfigError(`SVC_STATS_ALLOWED_TARGETS entries must be host or host:port, got "${trimmed}"`);
    }
    return trimmed.toLowerCase();
  });
}

/** SVC_WORKERS: 1 to 256; default the cores this process may use (os.availableParallelism). */
function workerCount(env: Env): number {
  const count = integer(env, 'SVC_WORKERS', availableParallelism());
  if (count > 256) throw new ConfigError(`SVC_WORKERS must be at most 256, got "${env.SVC_WORKERS}"`);
  return count;
}

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
  const devMode = argv.includes('--dev') || flag(env, 'SVC_DEV_MODE');
  return {
    // Loopback by default: the engine is a sidecar; expose it deliberately (0.0.0.0 in containers).
    host: env.SVC_HOST || '127.0.0.1',
    port,
    // Where the embedded store and dev-mode material live.
    dataDir: resolve(env.SVC_DATA_DIR || 'data'),
    // Dev mode creates demo policies with generated keys; never for production.
    devMode,
    // A JSON file of policies and keys to serve without a hub (docs/bootstrap.md).
    bootstrapFile: env.SVC_BOOTSTRAP_FILE ? resolve(env.SVC_BOOTSTRAP_FILE) : undefined,
    logLevel: level,
    shutdownGraceMs: integer(env, 'SVC_SHUTDOWN_GRACE_MS', 10_000),
    workers: workerCount(env),
    testHooks: flag(env, 'SVC_TEST_HOOKS'),
    limits: limits(env),
    store: {
      databaseUrl: databaseUrl(env),
      engineId: env.SVC_ENGINE_ID || 'default',
      masterKey: env.SVC_MASTER_KEY || undefined,
      masterKeyFile: env.SVC_MASTER_KEY_FILE ? resolve(env.SVC_MASTER_KEY_FILE) : undefined,
      allowRawKeyMaterial: flag(env, 'SVC_ALLOW_RAW_KEY_MATERIAL'),
      timeoutMs: integer(env, 'SVC_STORE_TIMEOUT_MS', 5_000),
      flushIntervalMs: integer(env, 'SVC_STORE_FLUSH_INTERVAL_MS', 10_000),
      idleCloseMs: integer(env, 'SVC_STORE_IDLE_CLOSE_MS', 15_000),
    },
    hub: {
      heartbeatIntervalMs: integer(env, 'SVC_HUB_HEARTBEAT_INTERVAL_MS', 30_000),
      backoffMaxMs: integer(env, 'SVC_HUB_BACKOFF_MAX_MS', 60_000),
      timeoutMs: integer(env, 'SVC_HUB_TIMEOUT_MS', 5_000),
      statsTimeoutMs: integer(env, 'SVC_STATS_TIMEOUT_MS', 3_000),
      statsAllowedTargets: statsAllowedTargets(env),
    },
    // Keeps the operations API off the application network (docs/operations.md).
    audit: auditConfig(env, resolve(env.SVC_DATA_DIR || 'data')),
    operationsListener: operationsListener(env, port),
    registration: registration(env),
    keyDestroyGraceMs: integer(env, 'SVC_KEY_DESTROY_GRACE_HOURS', 168, 0) * 3_600_000,
    pgwire: pgwire(env, devMode),
  };
}
