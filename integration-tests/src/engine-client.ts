// A small client for the fault tests: execution calls (encrypt, decrypt) and operations calls with
// the tenant header, plus polling for a condition the engine reaches by itself (ONLINE, caught up).
export interface CallResult {
  readonly status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tests assert on whatever the engine answered.
  readonly body: any;
}

async function call(url: string, method: string, body: unknown, headers: Record<string, string>): Promise<CallResult> {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // plain text bodies (401 unauthorized) stay text
  }
  return { status: response.status, body: parsed };
}

/** `opsUrl`: the operations listener (its own port by default); the execution URL when shared. */
export function engineClient(engineUrl: string, tenantId: string, opsUrl = engineUrl) {
  return {
    async encrypt(data: string, policyCode: string): Promise<string> {
      const result = await call(`${engineUrl}/api/encrypt`, 'POST', { data, policyCode }, {});
      if (result.status !== 200) throw new Error(`encrypt answered ${result.status}: ${JSON.stringify(result.body)}`);
      return result.body.data as string;
    },
    async decrypt(data: string): Promise<string> {
      const result = await call(`${engineUrl}/api/decrypt`, 'POST', { data }, {});
      if (result.status !== 200) throw new Error(`decrypt answered ${result.status}: ${JSON.stringify(result.body)}`);
      return result.body.data as string;
    },
    ops(method: 'GET' | 'POST', path: string, body?: unknown): Promise<CallResult> {
      return call(`${opsUrl}/engine/api/v1${path}`, method, body, { 'x-svc-tenant-id': tenantId });
    },
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- runtime info as the engine reports it.
    async info(): Promise<any> {
      return (await call(`${opsUrl}/engine/api/v1/runtime/info`, 'GET', undefined, { 'x-svc-tenant-id': tenantId }))
        .body;
    },
  };
}

/** Polls until `check` returns true (the engine gets there on its own timers); throws with `what` otherwise. */
export async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting until ${what}`);
}

/** The key version recorded in a ciphertext's header (bytes 2..5 of the decoded payload). */
export function keyVersionOf(ciphertext: string): number {
  const payload = Buffer.from(ciphertext.split(':')[2] ?? '', 'base64url');
  return payload.readUInt32BE(2);
}
