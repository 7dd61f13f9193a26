// The wire endpoint's command set (docs/pgwire.md): a fixed grammar of one keyword and base64
// arguments, so no quoting can break a value and no SQL parser is needed. Each command is a thin call
// into the execution service; errors become the SQLSTATEs and messages the SQL bridges raise, so a
// bridge can re-raise them unchanged. Nothing here touches a socket: the listener renders answers.
import type { AuditContext, AuditOperation } from '../core/audit.js';
import { EngineError } from '../core/errors.js';
import type { ExecutionService, ItemOutcome, ItemSuccess } from '../core/execution-service.js';
import type { ItemsRunner } from '../workers/protocol.js';

/** Column types of answers (PostgreSQL type OIDs). */
export const TEXT = 25;
export const INT4 = 23;
export const BOOL = 16;

export interface Column {
  readonly name: string;
  readonly type: number;
}

/** A result set: column descriptions, rows of text values (null: SQL NULL), the command tag. */
export interface Rows {
  readonly kind: 'rows';
  readonly columns: readonly Column[];
  readonly rows: readonly (readonly (string | null)[])[];
  readonly tag: string;
}

/** A statement that is accepted and does nothing (SET client_encoding, BEGIN, ...). */
export interface Done {
  readonly kind: 'done';
  readonly tag: string;
}

export interface Empty {
  readonly kind: 'empty';
}

/** An ErrorResponse: SQLSTATE, message and optional detail. */
export interface WireError {
  readonly kind: 'error';
  readonly code: string;
  readonly message: string;
  readonly detail?: string;
}

export type Answer = Rows | Done | Empty | WireError;

/** SQLSTATEs of the SQL bridges (docs/sql.md) and the standard ones this endpoint uses. */
export const SQLSTATE = {
  ITEM_FAILED: 'SV001',
  UNAVAILABLE: 'SV002',
  SYNTAX: '42601',
  BAD_TEXT: '22P02',
  BAD_ENCODING: '22021',
  BAD_VALUE: '22023',
  NOT_SUPPORTED: '0A000',
  INTERNAL: 'XX000',
} as const;

export const UNKNOWN_COMMAND = 'unknown command; see docs/pgwire.md';

export interface CommandContext {
  readonly execution: ExecutionService;
  /** Absent (SVC_WORKERS=1, tests): *_many commands run on the main thread, answered at once. */
  readonly batches?: ItemsRunner;
  readonly audit: AuditContext;
  readonly version: string;
  readonly service: string;
}

// ignoreBOM: a value may begin with U+FEFF, and it is data; the default decoder would drop it.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const LINE_BREAKS = /[\r\n]/g;
const DIGITS = /^[0-9]{1,10}$/;
// Surrounding whitespace and one trailing semicolon are what psql and hand-typed queries add.
const TRIM = /^[\s]+|[\s]+$/g;

function error(code: string, message: string, detail?: string): WireError {
  return detail === undefined ? { kind: 'error', code, message } : { kind: 'error', code, message, detail };
}

/** Thrown while reading arguments; becomes the answer. */
class ArgumentError extends Error {
  constructor(readonly answer: WireError) {
    super(answer.message);
  }
}

/** Decodes one text argument: `-` is the empty string, anything else standard base64 of UTF-8. */
function text(prefix: string, raw: string, position: number): string {
  if (raw === '-') return '';
  const compact = raw.includes('\n') || raw.includes('\r') ? raw.replace(LINE_BREAKS, '') : raw;
  // Canonical base64 only: a value must have exactly one spelling (no stray bits in the last group, no
  // other alphabet, no missing padding). Node's decoder is lenient, so the value must be exactly what its
  // bytes encode to; that test alone is exact, and cheaper than a pattern test before it.
  const bytes = Buffer.from(compact, 'base64');
  if (compact === '' || bytes.toString('base64') !== compact) {
    throw new ArgumentError(error(SQLSTATE.BAD_TEXT, `${prefix}: argument ${position} is not valid base64`));
  }
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ArgumentError(error(SQLSTATE.BAD_ENCODING, `${prefix}: argument ${position} is not valid UTF-8`));
  }
}

/** A policy version: decimal digits, or `-` for the latest. Range rules are the core's. */
function version(prefix: string, raw: string, position: number): number | undefined {
  if (raw === '-') return undefined;
  if (!DIGITS.test(raw)) {
    throw new ArgumentError(
      error(SQLSTATE.BAD_TEXT, `${prefix}: argument ${position} is not a decimal policy version or -`),
    );
  }
  return Number(raw);
}

/** The bridges' rule: a refusal of the data is SV001, the engine's own state (5xx) is SV002. */
function engineError(prefix: string, e: EngineError, detail?: string): WireError {
  const code = e.status >= 500 ? SQLSTATE.UNAVAILABLE : SQLSTATE.ITEM_FAILED;
  return error(code, `${prefix}: ${e.message}`, detail);
}

const NUL_IN_PLAINTEXT = 'decrypted data contains U+0000, which PostgreSQL text cannot hold';

interface Spec {
  /** How the bridges name the operation in messages. */
  readonly prefix: string;
  /** Fixed arguments before the values (or the exact count for scalar forms). */
  readonly fixed: readonly string[];
  /** Takes any number of values after the fixed arguments. */
  readonly many?: boolean;
  readonly run: (ctx: CommandContext, args: readonly string[]) => Answer | Promise<Answer>;
}

const DATA: readonly Column[] = [{ name: 'data', type: TEXT }];
const INDEXED: readonly Column[] = [
  { name: 'i', type: INT4 },
  { name: 'data', type: TEXT },
];

function one(value: string): Rows {
  return { kind: 'rows', columns: DATA, rows: [[value]], tag: 'SELECT 1' };
}

/** Rows of a `_many` command, or the first failed item as the bridges report it. */
function many(prefix: string, outcomes: readonly ItemOutcome[], decrypted = false): Answer {
  const rows: (string | null)[][] = new Array(outcomes.length);
  const n = outcomes.length;
  for (let i = 0; i < n; i++) {
    const outcome = outcomes[i] as ItemOutcome;
    const detail = n > 1 ? `item ${i + 1} of ${n}` : undefined;
    if (!outcome.ok) return engineError(prefix, outcome.error, detail);
    if (decrypted && outcome.data.includes('\0')) {
      return error(SQLSTATE.ITEM_FAILED, `${prefix}: ${NUL_IN_PLAINTEXT}`, detail);
    }
    rows[i] = [String(i + 1), outcome.data];
  }
  return { kind: 'rows', columns: INDEXED, rows, tag: `SELECT ${n}` };
}

function values(prefix: string, args: readonly string[], from: number): string[] {
  const out = new Array<string>(args.length - from);
  for (let i = from; i < args.length; i++) out[i - from] = text(prefix, args[i] as string, i + 1);
  return out;
}

const itemSize = (item: unknown) => (item as { data: string }).data.length;

/**
 * A *_many command's items through the execution service batch `method`, under the audit trail, and its
 * answer: on the worker pool when there is one (answered later), else at once on this thread.
 */
function manyCommand(
  ctx: CommandContext,
  prefix: string,
  operation: AuditOperation,
  method: 'encryptMany' | 'decryptMany' | 'rewrapMany',
  items: readonly { data: string }[],
  audit?: readonly unknown[],
): Answer | Promise<Answer> {
  const { batches } = ctx;
  if (!batches) return many(prefix, audited(ctx, operation, () => ctx.execution[method](items as never), audit), operation === 'decrypt');
  return ctx.execution
    .auditedAsync(ctx.audit, operation, async () => (await batches.run(method, items, itemSize)) as ItemOutcome[], audit)
    .then((outcomes) => many(prefix, outcomes, operation === 'decrypt'));
}

/** Runs one execution call under the audit trail, as the HTTP audit hook does for its routes. */
function audited<T extends ItemOutcome | ItemOutcome[]>(
  ctx: CommandContext,
  operation: AuditOperation,
  run: () => T,
  inputs?: readonly unknown[],
): T {
  return ctx.execution.audited(ctx.audit, operation, run, inputs);
}

function decryptedOne(prefix: string, result: ItemSuccess): Answer {
  if (result.data.includes('\0')) return error(SQLSTATE.ITEM_FAILED, `${prefix}: ${NUL_IN_PLAINTEXT}`);
  return one(result.data);
}

function equalityTerms(ctx: CommandContext, ref: Parameters<ExecutionService['equalityTerms']>[0], value: string): Answer {
  const result = audited(ctx, 'equality-terms', () => {
    const terms = ctx.execution.equalityTerms(ref, value);
    const outcome: ItemSuccess & { terms: typeof terms } = { ok: true, policyCode: terms.policyCode, data: '', terms };
    return outcome;
  });
  const { terms, keyVersions } = result.terms;
  return {
    kind: 'rows',
    columns: [
      { name: 'key_version', type: INT4 },
      { name: 'data', type: TEXT },
    ],
    rows: terms.map((term, i) => [String(keyVersions[i]), term]),
    tag: `SELECT ${terms.length}`,
  };
}

const COMMANDS: Readonly<Record<string, Spec>> = {
  svc_encrypt: {
    prefix: 'svc_encrypt',
    fixed: ['policy_code', 'value'],
    run: (ctx, a) => {
      const body = { policyCode: text('svc_encrypt', a[0] as string, 1), data: text('svc_encrypt', a[1] as string, 2) };
      return one(audited(ctx, 'encrypt', () => ctx.execution.encryptOne(body)).data);
    },
  },
  svc_encrypt_by_name: {
    prefix: 'svc_encrypt',
    fixed: ['policy_name', 'version', 'value'],
    run: (ctx, a) => {
      const body = {
        policyName: text('svc_encrypt', a[0] as string, 1),
        policyVersion: version('svc_encrypt', a[1] as string, 2),
        data: text('svc_encrypt', a[2] as string, 3),
      };
      return one(audited(ctx, 'encrypt', () => ctx.execution.encryptOne(body)).data);
    },
  },
  svc_decrypt: {
    prefix: 'svc_decrypt',
    fixed: ['ciphertext'],
    run: (ctx, a) => {
      const body = { data: text('svc_decrypt', a[0] as string, 1) };
      return decryptedOne('svc_decrypt', audited(ctx, 'decrypt', () => ctx.execution.decryptOne(body), [body]));
    },
  },
  svc_rewrap: {
    prefix: 'svc_rewrap',
    fixed: ['ciphertext'],
    run: (ctx, a) => {
      const body = { data: text('svc_rewrap', a[0] as string, 1) };
      return one(audited(ctx, 'rewrap', () => ctx.execution.rewrapOne(body), [body]).data);
    },
  },
  svc_encrypt_many: {
    prefix: 'svc_encrypt',
    fixed: ['policy_code'],
    many: true,
    run: (ctx, a) => {
      const policyCode = text('svc_encrypt', a[0] as string, 1);
      const items = values('svc_encrypt', a, 1).map((data) => ({ data, policyCode }));
      return manyCommand(ctx, 'svc_encrypt', 'encrypt', 'encryptMany', items);
    },
  },
  svc_encrypt_many_by_name: {
    prefix: 'svc_encrypt',
    fixed: ['policy_name', 'version'],
    many: true,
    run: (ctx, a) => {
      const policyName = text('svc_encrypt', a[0] as string, 1);
      const policyVersion = version('svc_encrypt', a[1] as string, 2);
      const items = values('svc_encrypt', a, 2).map((data) => ({ data, policyName, policyVersion }));
      return manyCommand(ctx, 'svc_encrypt', 'encrypt', 'encryptMany', items);
    },
  },
  svc_decrypt_many: {
    prefix: 'svc_decrypt',
    fixed: [],
    many: true,
    run: (ctx, a) => {
      const items = values('svc_decrypt', a, 0).map((data) => ({ data }));
      return manyCommand(ctx, 'svc_decrypt', 'decrypt', 'decryptMany', items, items);
    },
  },
  svc_rewrap_many: {
    prefix: 'svc_rewrap',
    fixed: [],
    many: true,
    run: (ctx, a) => {
      const items = values('svc_rewrap', a, 0).map((data) => ({ data }));
      return manyCommand(ctx, 'svc_rewrap', 'rewrap', 'rewrapMany', items, items);
    },
  },
  svc_equality_terms: {
    prefix: 'svc_equality_terms',
    fixed: ['policy_code', 'value'],
    run: (ctx, a) =>
      equalityTerms(
        ctx,
        { policyCode: text('svc_equality_terms', a[0] as string, 1) },
        text('svc_equality_terms', a[1] as string, 2),
      ),
  },
  svc_equality_terms_by_name: {
    prefix: 'svc_equality_terms',
    fixed: ['policy_name', 'version', 'value'],
    run: (ctx, a) => {
      const policyName = text('svc_equality_terms', a[0] as string, 1);
      const policyVersion = version('svc_equality_terms', a[1] as string, 2);
      const ref = policyVersion === undefined ? { policyName } : { policyName, policyVersion };
      return equalityTerms(ctx, ref, text('svc_equality_terms', a[2] as string, 3));
    },
  },
  svc_health: {
    prefix: 'svc_health',
    fixed: [],
    run: (ctx) => ({
      kind: 'rows',
      columns: [
        { name: 'status', type: TEXT },
        { name: 'service', type: TEXT },
        { name: 'version', type: TEXT },
      ],
      rows: [['UP', ctx.service, ctx.version]],
      tag: 'SELECT 1',
    }),
  },
  svc_info: {
    prefix: 'svc_info',
    fixed: [],
    run: (ctx) => {
      const snapshot = ctx.execution.cache.current;
      return {
        kind: 'rows',
        columns: [
          { name: 'engine_version', type: TEXT },
          { name: 'runtime_version', type: TEXT },
          { name: 'policy_count', type: INT4 },
          { name: 'key_count', type: INT4 },
          { name: 'configured', type: BOOL },
        ],
        rows: [
          [
            ctx.version,
            snapshot.runtimeVersion === '' ? null : snapshot.runtimeVersion,
            String(snapshot.policyCount),
            String(snapshot.keyCount),
            snapshot.configured ? 't' : 'f',
          ],
        ],
        tag: 'SELECT 1',
      };
    },
  },
};

/** Statements libpq, dblink and connection pools send on their own; accepted and ignored. */
const NO_OPS: Readonly<Record<string, string>> = {
  set: 'SET',
  reset: 'RESET',
  discard: 'DISCARD ALL',
  begin: 'BEGIN',
  start: 'START TRANSACTION',
  commit: 'COMMIT',
  end: 'COMMIT',
  rollback: 'ROLLBACK',
  abort: 'ROLLBACK',
};
const CLIENT_ENCODING = /^set\s+(?:session\s+)?client_encoding\s*(?:to|=)\s*(.*)$/i;
const UTF8_NAMES = new Set(['utf8', 'utf-8', 'unicode', 'default']);

function noOp(query: string, keyword: string): Answer | undefined {
  const tag = NO_OPS[keyword];
  if (tag === undefined) return undefined;
  const encoding = CLIENT_ENCODING.exec(query);
  if (encoding) {
    const name = (encoding[1] as string).trim().replace(/^['"]|['"]$/g, '').toLowerCase();
    if (!UTF8_NAMES.has(name)) return error(SQLSTATE.BAD_VALUE, 'only UTF8 is supported');
  }
  return { kind: 'done', tag };
}

/**
 * Answers one simple-query message; a *_many command on the worker pool answers later. Never throws (nor
 * rejects) for any input: only a bug does.
 */
export function runCommand(ctx: CommandContext, query: string): Answer | Promise<Answer> {
  let statement = query.replace(TRIM, '');
  if (statement.endsWith(';')) statement = statement.slice(0, -1).replace(TRIM, '');
  if (statement === '') return { kind: 'empty' };
  const args = statement.split(' ');
  const keyword = (args.shift() as string).toLowerCase();
  const spec = Object.hasOwn(COMMANDS, keyword) ? COMMANDS[keyword] : undefined;
  if (!spec) {
    const first = /^[A-Za-z]+/.exec(statement)?.[0]?.toLowerCase();
    return (first !== undefined && noOp(statement, first)) || error(SQLSTATE.SYNTAX, UNKNOWN_COMMAND);
  }
  if (spec.many ? args.length < spec.fixed.length : args.length !== spec.fixed.length) {
    const shape = [...spec.fixed, ...(spec.many ? ['value …'] : [])].join(' ');
    const count = spec.many ? `at least ${spec.fixed.length}` : String(spec.fixed.length);
    return error(
      SQLSTATE.SYNTAX,
      `${keyword} takes ${count} argument${count === '1' ? '' : 's'}${shape ? ` (${shape})` : ''}; see docs/pgwire.md`,
    );
  }
  const failed = (e: unknown): Answer => {
    if (e instanceof ArgumentError) return e.answer;
    if (e instanceof EngineError) return engineError(spec.prefix, e);
    throw e;
  };
  try {
    const answer = spec.run(ctx, args);
    return answer instanceof Promise ? answer.catch(failed) : answer;
  } catch (e) {
    return failed(e);
  }
}
