// The reference hub calling an engine's operations API: registering its runtime identity and pushing
// the tenant's policies and keys (full or incremental sync), as a real hub does.
import { REGISTRATION_TOKEN_HEADER, TENANT_HEADER } from '../hub/protocol.js';
import type { HubState, Tenant } from './hub-state.js';
import { HubError } from './hub-state.js';

const OPS = '/engine/api/v1';

export interface PushResult {
  readonly keys: number;
  readonly policies: number;
  readonly runtimeVersion: string;
}

async function call(
  engineUrl: string,
  path: string,
  tenantId: string | undefined,
  body: unknown,
  extraHeaders: Record<string, string> = {},
): Promise<unknown> {
  const url = `${engineUrl.replace(/\/+$/, '')}${OPS}${path}`;
  let response: Response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(tenantId ? { [TENANT_HEADER]: tenantId } : {}),
        ...extraHeaders,
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(5000),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause;
    throw new HubError(502, `engine ${path} failed: ${cause?.code ?? (error as Error).message}`);
  }
  const text = await response.text();
  if (!response.ok) throw new HubError(502, `engine ${path} answered ${response.status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : {};
}

/** Registers this hub and tenant with the engine; `currentTenant` is needed to move a registered engine to another tenant. */
export async function registerEngine(
  engineUrl: string,
  hubUrl: string,
  tenantId: string,
  currentTenant?: string,
  registrationToken?: string,
): Promise<void> {
  const headers: Record<string, string> = registrationToken ? { [REGISTRATION_TOKEN_HEADER]: registrationToken } : {};
  await call(engineUrl, '/runtime/identity', currentTenant, { hubUrl, tenantId }, headers);
}

/**
 * Pushes the tenant's runtime. Keys go first and without a runtime version, policies last with it:
 * if the second call fails the engine still reports its old version and the next heartbeat repairs it.
 */
export async function pushRuntime(
  engineUrl: string,
  state: HubState,
  tenant: Tenant,
  mode: 'full' | 'incremental',
): Promise<PushResult> {
  const payload = state.payload(tenant);
  const runtimeVersion = state.runtimeVersion(tenant);
  const suffix = mode === 'full' ? 'sync-all' : 'sync';
  if (payload.keys.length > 0) await call(engineUrl, `/cache/keys/${suffix}`, tenant.tenantId, { items: payload.keys });
  if (payload.policies.length > 0) {
    await call(engineUrl, `/cache/policies/${suffix}`, tenant.tenantId, { items: payload.policies, runtimeVersion });
  }
  return { keys: payload.keys.length, policies: payload.policies.length, runtimeVersion };
}
