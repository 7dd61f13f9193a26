// The audit trail: one event per execution or operations call (who, what, which policies and key
// versions, how many items, the outcome), written to every configured sink. Events carry metadata
// only: never a plaintext, a ciphertext, a key or a tenant id (a keyed fingerprint of it instead).
// This module has no I/O: sinks (file, stdout) live in src/audit/ and transports build the context.
// Event schema: docs/audit.md.
import { createHmac } from 'node:crypto';
import { ENVELOPE_PREFIX, envelopeKeyVersion } from './ciphertext-envelope.js';
import { type EngineError, errors } from './errors.js';

export const AUDIT_TRANSPORTS = [
  'http-json',
  'http-batch',
  'http-frame',
  'http-stream',
  'pgwire',
  'operations',
] as const;
export type AuditTransport = (typeof AUDIT_TRANSPORTS)[number];

/** encrypt, decrypt, rewrap, equality-terms, or an operations endpoint such as `cache/policy-sync`. */
export type AuditOperation = string;

/** Who called, as the transport knows it. */
export interface AuditContext {
  readonly transport: AuditTransport;
  /** Remote address of the connection. */
  readonly caller?: string;
  readonly requestId?: string;
  /** The database role, when the SQL bridge passes it. */
  readonly role?: string;
  /** A tenant id as presented; only its fingerprint is recorded. */
  readonly tenantId?: string;
}

export interface AuditItems {
  readonly total: number;
  readonly succeeded: number;
  readonly failed: number;
}

export interface AuditOutcome {
  /** ok: everything succeeded; partial: a batch with failed items; error: the call itself failed. */
  readonly result: 'ok' | 'partial' | 'error';
  /** HTTP status, when the transport is HTTP. */
  readonly status?: number;
  /** Error catalogue code of a failed call (or of the HTTP framework's refusal). */
  readonly error?: string;
}

export interface AuditEvent {
  readonly type: 'audit';
  readonly version: 1;
  readonly time: string;
  readonly requestId?: string;
  readonly transport: AuditTransport;
  readonly caller: { readonly address?: string; readonly role?: string; readonly tenant?: string };
  readonly operation: AuditOperation;
  readonly policyCodes: readonly string[];
  readonly keyVersions: readonly number[];
  readonly fromKeyVersions?: readonly number[];
  readonly items: AuditItems;
  /** Failed items by error code (batches and streams). */
  readonly itemErrors?: Readonly<Record<string, number>>;
  readonly outcome: AuditOutcome;
}

/** Where events go. `write` must not throw; a sink that cannot write says so through `writable()`. */
export interface AuditSink {
  readonly name: string;
  write(line: string): void;
  /** False while events cannot be written (the file cannot be opened or written). */
  writable(): boolean;
  /** Writes what is buffered and makes it durable (fsync where that applies). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** Lists in an event are bounded: a batch over many policies still gives one short line. */
export const MAX_LISTED = 32;

/** What the summary needs of an item's outcome (ItemOutcome and its binary-frame variants fit). */
export interface AuditedOutcome {
  readonly ok: boolean;
  readonly policyCode?: string;
  readonly data?: unknown;
  readonly error?: EngineError;
}

/**
 * What a call's items did, accumulated as results are produced (one per item, or a whole batch). Key
 * versions are read from envelope headers: the output's on encrypt and rewrap, the input's on decrypt
 * (and as the version a rewrap moved from); only the outcome's success makes them authentic.
 */
/** An AuditSummary as plain data. */
export interface AuditFacts {
  readonly policyCodes: readonly string[];
  readonly keyVersions: readonly number[];
  readonly fromKeyVersions: readonly number[];
  readonly itemErrors: Readonly<Record<string, number>>;
  readonly succeeded: number;
  readonly failed: number;
}

export class AuditSummary {
  readonly policyCodes = new Set<string>();
  readonly keyVersions = new Set<number>();
  readonly fromKeyVersions = new Set<number>();
  readonly itemErrors: Record<string, number> = {};
  succeeded = 0;
  failed = 0;
  readonly #output: boolean;
  readonly #input: Set<number> | undefined;
  /** Header characters → key version: a batch repeats a handful of headers thousands of times. */
  readonly #headers = new Map<string, number>();

  constructor(readonly operation: AuditOperation) {
    this.#output = operation === 'encrypt' || operation === 'rewrap';
    this.#input = operation === 'decrypt' ? this.keyVersions : operation === 'rewrap' ? this.fromKeyVersions : undefined;
  }

  /** `input` is what the item submitted: a ciphertext string or a `{data}` item. */
  add(outcome: AuditedOutcome, input?: unknown): void {
    const code = outcome.policyCode;
    if (code !== undefined && this.policyCodes.size < MAX_LISTED) this.policyCodes.add(code);
    if (!outcome.ok) {
      this.failItem(outcome.error?.code ?? 'UNKNOWN');
      return;
    }
    this.succeeded++;
    if (code === undefined) return;
    if (this.#output) this.#note(this.keyVersions, code, outcome.data);
    if (this.#input) {
      const data = typeof input === 'string' ? input : (input as { data?: unknown } | null | undefined)?.data;
      this.#note(this.#input, code, data);
    }
  }

  addAll(outcomes: readonly AuditedOutcome[], inputs?: readonly unknown[]): void {
    for (let i = 0; i < outcomes.length; i++) this.add(outcomes[i] as AuditedOutcome, inputs?.[i]);
  }

  /** The summary as plain data (a worker thread's share of a batch, docs/workers.md). */
  facts(): AuditFacts {
    return {
      policyCodes: [...this.policyCodes],
      keyVersions: [...this.keyVersions],
      fromKeyVersions: [...this.fromKeyVersions],
      itemErrors: { ...this.itemErrors },
      succeeded: this.succeeded,
      failed: this.failed,
    };
  }

  /** Adds another share of the same call (facts()), within the same listing limits. */
  merge(facts: AuditFacts): void {
    const add = <T>(into: Set<T>, values: readonly T[]) => {
      for (const value of values) if (into.size < MAX_LISTED) into.add(value);
    };
    add(this.policyCodes, facts.policyCodes);
    add(this.keyVersions, facts.keyVersions);
    add(this.fromKeyVersions, facts.fromKeyVersions);
    for (const [code, count] of Object.entries(facts.itemErrors)) this.itemErrors[code] = (this.itemErrors[code] ?? 0) + count;
    this.succeeded += facts.succeeded;
    this.failed += facts.failed;
  }

  failItem(code: string): void {
    this.failed++;
    this.itemErrors[code] = (this.itemErrors[code] ?? 0) + 1;
  }

  get total(): number {
    return this.succeeded + this.failed;
  }

  #note(into: Set<number>, policyCode: string, envelope: unknown): void {
    if (typeof envelope !== 'string' || into.size >= MAX_LISTED) return;
    // `hub:<code>:` then 8 base64url characters = the 6 header bytes.
    const start = ENVELOPE_PREFIX.length + policyCode.length + 1;
    const header = envelope.slice(start, start + 8);
    let version = this.#headers.get(header);
    if (version === undefined) {
      version = envelopeKeyVersion(`${ENVELOPE_PREFIX}${policyCode}:${header}`);
      if (version === undefined) return;
      this.#headers.set(header, version);
    }
    into.add(version);
  }
}

export interface AuditTrailOptions {
  /** Refuse calls (503) while no sink can be written (SVC_AUDIT_FAIL_CLOSED). */
  readonly failClosed: boolean;
  /** Key of the tenant fingerprint HMAC; engines sharing it give the same fingerprints. */
  readonly fingerprintKey: Uint8Array;
  /** The clock (tests). */
  readonly now?: () => Date;
}

export interface RecordInput {
  readonly context: AuditContext;
  readonly operation: AuditOperation;
  readonly summary?: AuditSummary;
  readonly outcome: AuditOutcome;
  /** Policy codes known even when no item ran (a failed single request). */
  readonly policyCodes?: readonly string[];
}

/** The ISO time of the current millisecond, formatted once per millisecond rather than once per event. */
let isoMs = -1;
let isoText = '';
function isoNow(): string {
  const ms = Date.now();
  if (ms !== isoMs) {
    isoMs = ms;
    isoText = new Date(ms).toISOString();
  }
  return isoText;
}

/** A flat object of strings and numbers as JSON.stringify writes it (undefined members left out). */
function flatJson(object: object): string {
  let out = '{';
  for (const key in object) {
    const value = (object as Record<string, unknown>)[key];
    if (value === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}${JSON.stringify(key)}:${typeof value === 'string' ? JSON.stringify(value) : String(value)}`;
  }
  return `${out}}`;
}

function stringList(values: readonly string[]): string {
  let out = '[';
  for (let i = 0; i < values.length; i++) out += `${i > 0 ? ',' : ''}${JSON.stringify(values[i])}`;
  return `${out}]`;
}

/**
 * One event as its JSON line: exactly the text of `JSON.stringify(event)` and a newline (tested), written
 * field by field because the generic JSON.stringify of the whole object is the largest part of an event's
 * cost on a single-value request. Members that are undefined are left out, as JSON.stringify does.
 */
export function formatAuditEvent(event: AuditEvent): string {
  let line = `{"type":${JSON.stringify(event.type)},"version":${event.version},"time":${JSON.stringify(event.time)}`;
  if (event.requestId !== undefined) line += `,"requestId":${JSON.stringify(event.requestId)}`;
  line += `,"transport":${JSON.stringify(event.transport)},"caller":${flatJson(event.caller)}`;
  line += `,"operation":${JSON.stringify(event.operation)},"policyCodes":${stringList(event.policyCodes)}`;
  line += `,"keyVersions":[${event.keyVersions.join(',')}]`;
  if (event.fromKeyVersions !== undefined) line += `,"fromKeyVersions":[${event.fromKeyVersions.join(',')}]`;
  line += `,"items":${flatJson(event.items)}`;
  if (event.itemErrors !== undefined) line += `,"itemErrors":${flatJson(event.itemErrors)}`;
  return `${line},"outcome":${flatJson(event.outcome)}}\n`;
}

export class AuditTrail {
  readonly #sinks: readonly AuditSink[];
  readonly #options: AuditTrailOptions;

  constructor(sinks: readonly AuditSink[], options: AuditTrailOptions) {
    this.#sinks = sinks;
    this.#options = options;
  }

  get failClosed(): boolean {
    return this.#options.failClosed;
  }

  get sinkNames(): string[] {
    return this.#sinks.map((s) => s.name);
  }

  /** True when at least one sink can take events. */
  writable(): boolean {
    return this.#sinks.some((s) => s.writable());
  }

  /** Under fail-closed, throws the 503 the catalogue prescribes while no sink can be written. */
  ensureWritable(): void {
    if (this.#options.failClosed && !this.writable()) throw errors.auditUnavailable();
  }

  /**
   * A short, non-reversible name for a tenant id: the id is the operations API's credential, so the
   * log holds a keyed HMAC prefix that identifies the same tenant across events but cannot be
   * reversed by guessing ids without the key.
   */
  fingerprint(tenantId: string): string {
    return createHmac('sha256', this.#options.fingerprintKey).update(tenantId, 'utf8').digest('hex').slice(0, 16);
  }

  record(input: RecordInput): void {
    const { context, summary } = input;
    const caller: { address?: string; role?: string; tenant?: string } = {};
    if (context.caller !== undefined) caller.address = context.caller;
    if (context.role !== undefined) caller.role = context.role;
    if (context.tenantId !== undefined) caller.tenant = this.fingerprint(context.tenantId);
    const policyCodes = summary && summary.policyCodes.size > 0 ? [...summary.policyCodes] : (input.policyCodes ?? []);
    const event: AuditEvent = {
      type: 'audit',
      version: 1,
      time: this.#options.now ? this.#options.now().toISOString() : isoNow(),
      requestId: context.requestId,
      transport: context.transport,
      caller,
      operation: input.operation,
      policyCodes,
      keyVersions: summary ? [...summary.keyVersions] : [],
      fromKeyVersions: summary && summary.fromKeyVersions.size > 0 ? [...summary.fromKeyVersions] : undefined,
      items: { total: summary?.total ?? 0, succeeded: summary?.succeeded ?? 0, failed: summary?.failed ?? 0 },
      itemErrors: summary && summary.failed > 0 ? summary.itemErrors : undefined,
      outcome: input.outcome,
    };
    const line = formatAuditEvent(event);
    for (const sink of this.#sinks) sink.write(line);
  }

  /**
   * Runs one call of a transport without HTTP hooks and records it (fail-closed checked first).
   * `inputs`: the submitted items, in order (the key versions of decrypt and rewrap are read from them).
   */
  run<T extends AuditedOutcome | AuditedOutcome[]>(
    context: AuditContext,
    operation: AuditOperation,
    call: () => T,
    inputs?: readonly unknown[],
  ): T {
    this.ensureWritable();
    const summary = new AuditSummary(operation);
    try {
      return this.#succeeded(context, operation, summary, call(), inputs);
    } catch (error) {
      this.#failed(context, operation, summary, error);
      throw error;
    }
  }

  /** run() for a call that answers later (a batch on the crypto workers). */
  async runAsync<T extends AuditedOutcome[]>(
    context: AuditContext,
    operation: AuditOperation,
    call: () => Promise<T>,
    inputs?: readonly unknown[],
  ): Promise<T> {
    this.ensureWritable();
    const summary = new AuditSummary(operation);
    try {
      return this.#succeeded(context, operation, summary, await call(), inputs);
    } catch (error) {
      this.#failed(context, operation, summary, error);
      throw error;
    }
  }

  #succeeded<T extends AuditedOutcome | AuditedOutcome[]>(
    context: AuditContext,
    operation: AuditOperation,
    summary: AuditSummary,
    result: T,
    inputs?: readonly unknown[],
  ): T {
    if (Array.isArray(result)) summary.addAll(result, inputs);
    else summary.add(result as AuditedOutcome, inputs?.[0]);
    this.record({ context, operation, summary, outcome: { result: summary.failed === 0 ? 'ok' : 'partial' } });
    return result;
  }

  #failed(context: AuditContext, operation: AuditOperation, summary: AuditSummary, error: unknown): void {
    const code = (error as { code?: unknown }).code;
    this.record({ context, operation, summary, outcome: { result: 'error', error: typeof code === 'string' ? code : 'INTERNAL' } });
  }

  async flush(): Promise<void> {
    await Promise.all(this.#sinks.map((s) => s.flush()));
  }

  async close(): Promise<void> {
    await Promise.all(this.#sinks.map((s) => s.close()));
  }
}
