// The SQL surface the bridge installs (ARCHITECTURE §7, docs/sql.md): every function with its SQL
// signature and the one line each bridge language runs. Both languages share everything else, so a
// function added here appears in the migration, the extension script and the uninstall script at once.

export interface BridgeFunction {
  readonly name: string;
  /** Argument list as written in CREATE FUNCTION (names, types, defaults). */
  readonly args: string;
  /** Argument types only: the identity used by GRANT, REVOKE and DROP. */
  readonly identity: string;
  readonly returns: string;
  /** STRICT: NULL in, NULL out, without calling the engine. */
  readonly strict: boolean;
  /** Python statement(s) run with the bridge bound to `b`. */
  readonly python: string;
  /** JavaScript statement(s) run with the bridge bound to `b`. */
  readonly javascript: string;
  readonly comment: string;
}

const byName = {
  python:
    'if data is None or policy_name is None:\n    return None\nreturn b.encrypt_by_name(data, policy_name, policy_version)',
  javascript:
    'if (data === null || policy_name === null) return null;\nreturn b.encryptByName(data, policy_name, policy_version === null ? null : policy_version);',
};

export const FUNCTIONS: readonly BridgeFunction[] = [
  {
    name: 'svc_encrypt',
    args: 'data text, policy_code text',
    identity: 'text, text',
    returns: 'text',
    strict: true,
    python: 'return b.encrypt(data, policy_code)',
    javascript: 'return b.encrypt(data, policy_code);',
    comment: 'Encrypts a value under a policy code through the engine; NULL in, NULL out.',
  },
  {
    name: 'svc_encrypt_by_name',
    args: 'data text, policy_name text, policy_version integer DEFAULT NULL',
    identity: 'text, text, integer',
    returns: 'text',
    strict: false,
    ...byName,
    comment: 'Encrypts a value under a policy name, at policy_version or the latest version when NULL.',
  },
  {
    name: 'svc_encrypt',
    args: 'data text, policy_name text, policy_version integer',
    identity: 'text, text, integer',
    returns: 'text',
    strict: false,
    ...byName,
    comment: 'Same as svc_encrypt_by_name: encrypts under a policy name, at policy_version or the latest when NULL.',
  },
  {
    name: 'svc_decrypt',
    args: 'data text',
    identity: 'text',
    returns: 'text',
    strict: true,
    python: 'return b.decrypt(data)',
    javascript: 'return b.decrypt(data);',
    comment: 'Decrypts a ciphertext (hub:<policy>:...) through the engine; NULL in, NULL out.',
  },
  {
    name: 'svc_encrypt',
    args: 'data text[], policy_code text',
    identity: 'text[], text',
    returns: 'text[]',
    strict: true,
    python: 'return b.encrypt_array(data, policy_code)',
    javascript: 'return b.encryptArray(data, policy_code);',
    comment: 'Encrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.',
  },
  {
    name: 'svc_decrypt',
    args: 'data text[]',
    identity: 'text[]',
    returns: 'text[]',
    strict: true,
    python: 'return b.decrypt_array(data)',
    javascript: 'return b.decryptArray(data);',
    comment: 'Decrypts a one-dimensional array in batch requests of svc.batch_size; order and NULL elements kept.',
  },
  {
    name: 'svc_health',
    args: '',
    identity: '',
    returns: 'jsonb',
    strict: false,
    python: 'return b.health()',
    javascript: 'return JSON.parse(b.health());',
    comment: "The engine's GET /api/health answer; raises SV002 when the engine cannot be reached.",
  },
  {
    name: 'svc_engine_info',
    args: '',
    identity: '',
    returns: 'jsonb',
    strict: false,
    python: 'return b.engine_info()',
    javascript: 'return JSON.parse(b.engineInfo());',
    comment: 'The bridge settings in effect, the engine health and, when readable, its runtime info.',
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

/** The shape of a ciphertext, used to skip values already encrypted (and, on decrypt, not encrypted). */
export const CIPHERTEXT_PATTERN = '^hub:[A-Za-z0-9_.-]{1,128}:[A-Za-z0-9_-]+$';

/** The role the install creates and grants EXECUTE to. */
export const ROLE = 'svc_user';
