// The SQL surface the bridge installs (ARCHITECTURE §7, docs/sql.md): every function with its SQL
// signature, and the internal functions with the one line each bridge language runs. Both languages
// share everything else, so a function added here appears in the migration, the extension script and
// the uninstall script at once.

/**
 * A public function is a small SQL wrapper (STRICT where NULL in means NULL out, search_path pinned,
 * SECURITY DEFINER) that reads the engine address from the foreign server SERVER_NAME and the svc.* tuning
 * settings with current_setting(), and calls an internal function in the bridge language with them as
 * `cfg`. The address is the DBA's: only the server's owner (or a superuser) can change it, the internal
 * functions that take it as an argument are executable by their owner alone, and the wrapper runs as that
 * owner. Settings travel as an argument because PL/Python cannot run queries in a parallel worker (every
 * plpy.execute opens a subtransaction), and reading them in SQL costs one catalog lookup.
 */
export interface BridgeFunction {
  readonly name: string;
  /** Argument list as written in CREATE FUNCTION (names, types, defaults). */
  readonly args: string;
  /** Argument types only: the identity used by GRANT, REVOKE and DROP. */
  readonly identity: string;
  readonly returns: string;
  /** STRICT: NULL in, NULL out, without calling the engine. */
  readonly strict: boolean;
  /** The wrapper's SQL expression; `cfg` stands for the settings array (see CFG_SQL). */
  readonly call: string;
  readonly comment: string;
}

/** An internal function in the bridge language; its last argument is `cfg text[]`. */
export interface ImplFunction {
  readonly name: string;
  readonly args: string;
  readonly identity: string;
  readonly returns: string;
  /** Python statement(s) run with the bridge bound to `b`. */
  readonly python: string;
  /** JavaScript statement(s) run with the bridge bound to `b`. */
  readonly javascript: string;
}

/** The foreign server that holds the engine address for every bridge (docs/sql.md §2). */
export const SERVER_NAME = 'svc_engine';
/**
 * The foreign-data wrapper the PL/Python and plv8 bridges expect SERVER_NAME on: no handler, no validator,
 * only a place for options. Creating it needs a superuser and using it USAGE, which nobody but its owner
 * has, so an application role can neither create a server on it nor take over the name.
 */
export const BRIDGE_FDW = 'svc_bridge_fdw';

/**
 * What the wrappers pass as `cfg`: [the statement's start time, svc.timeout_ms, svc.batch_size]. A simple
 * expression, evaluated without a query per row. The bridges read the engine address from the options of
 * the server SERVER_NAME themselves, as the owner of the functions, once per statement (the start time
 * tells them a new one began), and the tenant id from the owner's user mapping where they need it: no
 * function takes an address as an argument.
 */
export const CFG_SQL =
  "ARRAY[pg_catalog.statement_timestamp()::text, pg_catalog.current_setting('svc.timeout_ms', true), pg_catalog.current_setting('svc.batch_size', true)]";

export const IMPLS: readonly ImplFunction[] = [
  {
    name: 'svc__encrypt',
    args: 'data text, policy_code text, cfg text[]',
    identity: 'text, text, text[]',
    returns: 'text',
    python: 'return b.encrypt(cfg, data, policy_code)',
    javascript: 'return b.encrypt(cfg, data, policy_code);',
  },
  {
    name: 'svc__encrypt_by_name',
    args: 'data text, policy_name text, policy_version integer, cfg text[]',
    identity: 'text, text, integer, text[]',
    returns: 'text',
    python:
      'if data is None or policy_name is None:\n    return None\nreturn b.encrypt_by_name(cfg, data, policy_name, policy_version)',
    javascript:
      'if (data === null || policy_name === null) return null;\nreturn b.encryptByName(cfg, data, policy_name, policy_version);',
  },
  {
    name: 'svc__decrypt',
    args: 'data text, cfg text[]',
    identity: 'text, text[]',
    returns: 'text',
    python: 'return b.decrypt(cfg, data)',
    javascript: 'return b.decrypt(cfg, data);',
  },
  {
    name: 'svc__encrypt_array',
    args: 'data text[], policy_code text, cfg text[]',
    identity: 'text[], text, text[]',
    returns: 'text[]',
    python: 'return b.encrypt_array(cfg, data, policy_code)',
    javascript: 'return b.encryptArray(cfg, data, policy_code);',
  },
  {
    name: 'svc__decrypt_array',
    args: 'data text[], cfg text[]',
    identity: 'text[], text[]',
    returns: 'text[]',
    python: 'return b.decrypt_array(cfg, data)',
    javascript: 'return b.decryptArray(cfg, data);',
  },
  {
    name: 'svc__rewrap',
    args: 'data text, cfg text[]',
    identity: 'text, text[]',
    returns: 'text',
    python: 'return b.rewrap(cfg, data)',
    javascript: 'return b.rewrap(cfg, data);',
  },
  {
    name: 'svc__rewrap_array',
    args: 'data text[], cfg text[]',
    identity: 'text[], text[]',
    returns: 'text[]',
    python: 'return b.rewrap_array(cfg, data)',
    javascript: 'return b.rewrapArray(cfg, data);',
  },
  {
    name: 'svc__array_send',
    args: 'op text, data text[], policy_code text, cfg text[]',
    identity: 'text, text[], text, text[]',
    returns: 'integer',
    python: 'return b.array_send(cfg, op, data, policy_code)',
    javascript: 'return b.arraySend(cfg, op, data, policy_code);',
  },
  {
    name: 'svc__array_collect',
    args: 'op text, data text[], policy_code text, cfg text[]',
    identity: 'text, text[], text, text[]',
    returns: 'text[]',
    python: 'return b.array_collect(cfg, op, data, policy_code)',
    javascript: 'return b.arrayCollect(cfg, op, data, policy_code);',
  },
  {
    name: 'svc__equality_terms',
    args: 'data text, policy_code text, cfg text[]',
    identity: 'text, text, text[]',
    returns: 'text[]',
    python: 'return b.equality_terms(cfg, data, policy_code)',
    javascript: 'return b.equalityTerms(cfg, data, policy_code);',
  },
  {
    name: 'svc__health',
    args: 'cfg text[]',
    identity: 'text[]',
    returns: 'jsonb',
    python: 'return b.health(cfg)',
    javascript: 'return JSON.parse(b.health(cfg));',
  },
  {
    name: 'svc__engine_info',
    args: 'cfg text[]',
    identity: 'text[]',
    returns: 'jsonb',
    python: 'return b.engine_info(cfg)',
    javascript: 'return JSON.parse(b.engineInfo(cfg));',
  },
];

export const FUNCTIONS: readonly BridgeFunction[] = [
  {
    name: 'svc_encrypt',
    args: 'data text, policy_code text',
    identity: 'text, text',
    returns: 'text',
    strict: true,
    call: 'svc__encrypt(data, policy_code, cfg)',
    comment: 'Encrypts a value under a policy code through the engine; NULL in, NULL out.',
  },
  {
    name: 'svc_encrypt_by_name',
    args: 'data text, policy_name text, policy_version integer DEFAULT NULL',
    identity: 'text, text, integer',
    returns: 'text',
    strict: false,
    call: 'svc__encrypt_by_name(data, policy_name, policy_version, cfg)',
    comment: 'Encrypts a value under a policy name, at policy_version or the latest version when NULL.',
  },
  {
    name: 'svc_encrypt',
    args: 'data text, policy_name text, policy_version integer',
    identity: 'text, text, integer',
    returns: 'text',
    strict: false,
    call: 'svc__encrypt_by_name(data, policy_name, policy_version, cfg)',
    comment: 'Same as svc_encrypt_by_name: encrypts under a policy name, at policy_version or the latest when NULL.',
  },
  {
    name: 'svc_decrypt',
    args: 'data text',
    identity: 'text',
    returns: 'text',
    strict: true,
    call: 'svc__decrypt(data, cfg)',
    comment: 'Decrypts a ciphertext (hub:<policy>:...) through the engine; NULL in, NULL out.',
  },
  {
    name: 'svc_encrypt',
    args: 'data text[], policy_code text',
    identity: 'text[], text',
    returns: 'text[]',
    strict: true,
    call: 'svc__encrypt_array(data, policy_code, cfg)',
    comment: 'Encrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.',
  },
  {
    name: 'svc_decrypt',
    args: 'data text[]',
    identity: 'text[]',
    returns: 'text[]',
    strict: true,
    call: 'svc__decrypt_array(data, cfg)',
    comment: 'Decrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.',
  },
  {
    name: 'svc_rewrap',
    args: 'data text',
    identity: 'text',
    returns: 'text',
    strict: true,
    call: 'svc__rewrap(data, cfg)',
    comment:
      "Re-encrypts a ciphertext under the newest active key version of its own policy's key, inside the engine; unchanged when already there. NULL in, NULL out.",
  },
  {
    name: 'svc_rewrap',
    args: 'data text[]',
    identity: 'text[]',
    returns: 'text[]',
    strict: true,
    call: 'svc__rewrap_array(data, cfg)',
    comment: 'svc_rewrap for a one-dimensional array, in batch requests of svc.batch_size; order and NULL elements kept.',
  },
  {
    name: 'svc_array_send',
    args: 'op text, data text[], policy_code text DEFAULT NULL',
    identity: 'text, text[], text',
    returns: 'integer',
    strict: false,
    call: 'svc__array_send(op, data, policy_code, cfg)',
    comment:
      "Sends an array ahead to the engine (op 'encrypt' with a policy code, 'decrypt' or 'rewrap') and returns at once, with the number of values sent; svc_array_collect with the same arguments returns the results. Two arrays pending per session: a third send discards the oldest.",
  },
  {
    name: 'svc_array_collect',
    args: 'op text, data text[], policy_code text DEFAULT NULL',
    identity: 'text, text[], text',
    returns: 'text[]',
    strict: false,
    call: 'svc__array_collect(op, data, policy_code, cfg)',
    comment:
      'The results of the array svc_array_send sent ahead with the same arguments, as the array forms return them (order and NULL elements kept); 55000 when the session sent no such array.',
  },
  {
    name: 'svc_equality_terms',
    args: 'data text, policy_code text',
    identity: 'text, text',
    returns: 'text[]',
    strict: true,
    call: 'svc__equality_terms(data, policy_code, cfg)',
    comment:
      'The ciphertexts of a value under every key version of a deterministic policy that can still decrypt, newest first: WHERE col = ANY ((SELECT svc_equality_terms(v, p))::text[]).',
  },
  {
    name: 'svc_health',
    args: '',
    identity: '',
    returns: 'jsonb',
    strict: false,
    call: 'svc__health(cfg)',
    comment: "The engine's GET /api/health answer; raises SV002 when the engine cannot be reached.",
  },
  {
    name: 'svc_engine_info',
    args: '',
    identity: '',
    returns: 'jsonb',
    strict: false,
    call: 'svc__engine_info(cfg)',
    comment: 'The engine address and bridge settings in effect, the engine health and, when readable, its runtime info.',
  },
];

/** Procedures (PL/pgSQL, bridge-independent) for bulk work on a column in place. */
export interface BulkProcedure {
  readonly name: string;
  readonly args: string;
  readonly identity: string;
  readonly op: 'encrypt' | 'decrypt';
  readonly comment: string;
}

export const PROCEDURES: readonly BulkProcedure[] = [
  {
    name: 'svc_encrypt_column',
    args: 'tbl regclass, col name, policy_code text, chunk_rows integer DEFAULT 10000, key_column name DEFAULT NULL',
    identity: 'regclass, name, text, integer, name',
    op: 'encrypt',
    comment:
      'Encrypts a text column in place in chunks, committing each; skips values already in ciphertext shape, so it resumes after an interruption.',
  },
  {
    name: 'svc_decrypt_column',
    args: 'tbl regclass, col name, chunk_rows integer DEFAULT 10000, key_column name DEFAULT NULL',
    identity: 'regclass, name, integer, name',
    op: 'decrypt',
    comment:
      'Decrypts a text column in place in chunks, committing each; skips values not in ciphertext shape, so it resumes after an interruption.',
  },
];

/**
 * Key rotation on a column (docs/rotation.md), in SQL and PL/pgSQL whatever the bridge: reading a
 * ciphertext's key version needs no engine, and the rewrap walk runs over svc_rewrap(text[]).
 */
export const ROTATION: ReadonlyArray<{ kind: 'FUNCTION' | 'PROCEDURE'; name: string; identity: string; comment: string }> = [
  {
    kind: 'FUNCTION',
    name: 'svc_key_version',
    identity: 'text',
    comment: "The key version recorded in a ciphertext's header, read without the engine; NULL when the value is not a ciphertext.",
  },
  {
    kind: 'FUNCTION',
    name: 'svc_key_versions',
    identity: 'regclass, name',
    comment:
      "Counts a column's values per policy and key version (policy_code and key_version NULL: not a ciphertext), to see that no value of an old version remains before retiring it.",
  },
  {
    kind: 'PROCEDURE',
    name: 'svc_rewrap_column',
    identity: 'regclass, name, integer, name, boolean',
    comment:
      'Rewraps a column in place to the newest key version of each value\'s policy, in chunks, committing each; skips values already there, so a second run is cheap and an interrupted one resumes. dry_run only counts values per key version.',
  },
];

/**
 * The shape of a ciphertext (`hub:<1 to 128 code characters>:<base64url>`), used to skip values already
 * encrypted (and, on decrypt, not encrypted), as an SQL condition on `expr`. The length of the code is
 * checked apart: a bounded repetition such as {1,128} makes PostgreSQL's regex engine about eight times
 * slower per row, and a column walk tests every row it passes.
 */
export function isCiphertextSql(expr: string): string {
  return `(${expr} ~ '^hub:[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+$' AND pg_catalog.length(pg_catalog.split_part(${expr}, ':', 2)) <= 128)`;
}

/** The role the install creates and grants EXECUTE to. */
export const ROLE = 'svc_user';
