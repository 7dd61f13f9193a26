// HTTP side of the audit trail: one event per execution or operations call, written when the response
// is done (onResponse), whatever the outcome, including refusals before any handler ran (415, 413, a
// bad body, 401). Handlers add their items' outcomes to request.auditSummary; the event itself never
// holds a request or response body. Under fail-closed, audited calls are refused up front with 503
// while no sink can be written.
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type AuditContext, type AuditOperation, AuditSummary, type AuditTrail, type AuditTransport } from '../core/audit.js';
import { envelopePolicyCode, POLICY_CODE_PATTERN } from '../core/ciphertext-envelope.js';
import { TENANT_HEADER } from '../hub/protocol.js';
import { BINARY_FRAME_TYPE } from './codecs/binary-frame.js';
import { mediaType } from './content-type.js';
import { toEngineError } from './error-handler.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set on audited calls when an audit trail is configured; handlers add their outcomes to it. */
    auditSummary: AuditSummary | null;
    auditCall: AuditCall | null;
    auditError: string | null;
  }
}

interface AuditCall {
  readonly operation: AuditOperation;
  readonly transport: AuditTransport;
  readonly requestId: string;
}

const EXECUTION_PATH = /^(?:\/engine)?\/api\/(encrypt|decrypt|rewrap|equality-terms)(?:\/(batch|stream))?$/;
const OPERATIONS_PATH = /^\/engine\/api\/v1\/(.+)$/;

/** What a route template is, for the audit: an execution call (batch: JSON or frame by media type), an operations call, or neither. */
type RouteKind = { operation: AuditOperation; transport: AuditTransport | 'batch' } | null;

function classifyRoute(url: string): RouteKind {
  const execution = EXECUTION_PATH.exec(url);
  if (execution) {
    const operation = execution[1] as AuditOperation;
    const kind = execution[2];
    if (kind === 'stream') return { operation, transport: 'http-stream' };
    if (kind === 'batch') return { operation, transport: 'batch' };
    return { operation, transport: 'http-json' };
  }
  const operations = OPERATIONS_PATH.exec(url);
  if (operations) return { operation: operations[1] as string, transport: 'operations' };
  return null;
}

/** Route templates are few and fixed: each is classified once, not per request. */
const routeKinds = new Map<string, RouteKind>();

function classify(request: FastifyRequest): { operation: AuditOperation; transport: AuditTransport } | undefined {
  const url = request.routeOptions.url;
  if (url === undefined) return undefined;
  let kind = routeKinds.get(url);
  if (kind === undefined) routeKinds.set(url, (kind = classifyRoute(url)));
  if (kind === null) return undefined;
  if (kind.transport !== 'batch') return kind as { operation: AuditOperation; transport: AuditTransport };
  return { operation: kind.operation, transport: mediaType(request) === BINARY_FRAME_TYPE ? 'http-frame' : 'http-batch' };
}

/** The policy a failed single request named, when it names one in the policy-code shape. */
function namedPolicy(body: unknown): string[] {
  if (typeof body !== 'object' || body === null) return [];
  const raw = body as { policyCode?: unknown; data?: unknown };
  if (typeof raw.policyCode === 'string' && POLICY_CODE_PATTERN.test(raw.policyCode)) return [raw.policyCode];
  const fromEnvelope = envelopePolicyCode(raw.data);
  return fromEnvelope ? [fromEnvelope] : [];
}

function context(request: FastifyRequest, call: AuditCall): AuditContext {
  // The header on tenant-scoped calls; the body on identity registration (which sets the tenant).
  const tenant =
    call.transport === 'operations'
      ? (request.headers[TENANT_HEADER] ?? (request.body as { tenantId?: unknown } | undefined)?.tenantId)
      : undefined;
  return {
    transport: call.transport,
    caller: request.ip,
    requestId: call.requestId,
    ...(typeof tenant === 'string' ? { tenantId: tenant } : {}),
  };
}

function record(trail: AuditTrail, request: FastifyRequest, reply: FastifyReply): void {
  const call = request.auditCall;
  if (!call) return;
  const status = reply.statusCode;
  let summary = request.auditSummary ?? undefined;
  // A single call that failed ran (or was refused for) exactly one item.
  if (call.transport === 'http-json' && summary && summary.total === 0 && status >= 400) {
    summary.failItem(request.auditError ?? `HTTP_${status}`);
  }
  if (call.transport === 'operations') summary = undefined;
  const result = status >= 400 ? 'error' : summary && summary.failed > 0 ? 'partial' : 'ok';
  trail.record({
    context: context(request, call),
    operation: call.operation,
    summary,
    policyCodes: call.transport === 'http-json' ? namedPolicy(request.body) : [],
    outcome: {
      result,
      status,
      ...(status >= 400 ? { error: request.auditError ?? `HTTP_${status}` } : {}),
    },
  });
}

/** Installs the audit hooks on an app (the main one, or the operations listener's). */
export function installAuditHooks(app: FastifyInstance, trail: AuditTrail): void {
  app.decorateRequest('auditSummary', null);
  app.decorateRequest('auditCall', null);
  app.decorateRequest('auditError', null);

  app.addHook('onRequest', (request, reply, done) => {
    const kind = classify(request);
    if (!kind) {
      done();
      return;
    }
    const requestId = randomUUID();
    reply.header('x-request-id', requestId);
    request.auditCall = { operation: kind.operation, transport: kind.transport, requestId };
    request.auditSummary = new AuditSummary(kind.operation);
    try {
      trail.ensureWritable();
    } catch (error) {
      // Refused calls are not recorded: nothing can be written, which is why they are refused.
      request.auditCall = null;
      done(error as Error);
      return;
    }
    done();
  });

  app.addHook('onError', (request, _reply, error, done) => {
    // The catalogue code the error handler answers with (the body limit only shapes its message).
    request.auditError = toEngineError(error, request, 0).code;
    done();
  });

  app.addHook('onResponse', (request, reply, done) => {
    record(trail, request, reply);
    done();
  });
}
