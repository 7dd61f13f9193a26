// Last step of the compose stack: gives the reference hub a demo tenant (the stack's master key, one
// AES-256-GCM and one AES-256-SIV key, the policies DEMO_RANDOM and DEMO_DETERMINISTIC) and registers the
// engine with it, carrying the engine's one-time registration token. The engine then heartbeats, receives
// its runtime and turns ready. Safe to run again: what exists is kept.
// Settings: SVC_HUB_URL (http://hub:9100), SVC_ENGINE_OPS_URL (the engine's operations listener),
// SVC_TENANT_ID (demo), SVC_SECRETS_DIR (master.key, registration.token), SVC_HUB_ADMIN_TOKEN (optional).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const env = process.env;
const hubUrl = (env.SVC_HUB_URL ?? 'http://hub:9100').replace(/\/$/, '');
const engineOpsUrl = env.SVC_ENGINE_OPS_URL;
const tenantId = env.SVC_TENANT_ID ?? 'demo';
const secretsDir = env.SVC_SECRETS_DIR ?? '/secrets';
if (!engineOpsUrl) {
  console.error('provision: set SVC_ENGINE_OPS_URL to the engine operations listener');
  process.exit(2);
}
const secret = (name) => readFileSync(join(secretsDir, name), 'utf8').trim();

async function admin(method, path, body) {
  const headers = { 'content-type': 'application/json' };
  if (env.SVC_HUB_ADMIN_TOKEN) headers.authorization = `Bearer ${env.SVC_HUB_ADMIN_TOKEN}`;
  const res = await fetch(`${hubUrl}/hub/admin/tenants/${tenantId}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function must(method, path, body) {
  const res = await admin(method, path, body);
  if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

// The hub and the engine may still be starting: compose orders the start, not readiness of each step.
async function retry(what, fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (attempt >= 30) throw error;
      console.log(`provision: ${what} not yet possible (${error.message}); retrying`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

await retry('tenant', () => must('PUT', '', { masterKey: secret('master.key') }));
const manifest = await must('GET', '');
const aliases = new Set((manifest.keys ?? []).map((key) => key.alias));
for (const [alias, algorithm] of [['demo-gcm', 'AES-256-GCM'], ['demo-siv', 'AES-256-SIV']]) {
  if (!aliases.has(alias)) await must('POST', '/keys', { alias, algorithm });
}
await must('PUT', '/policies/DEMO_RANDOM', { algorithm: 'AES-256-GCM', keyAlias: 'demo-gcm' });
await must('PUT', '/policies/DEMO_DETERMINISTIC', { algorithm: 'AES-256-SIV', keyAlias: 'demo-siv' });

await retry('registration', async () => {
  // A first registration carries the token; a repeated one (the stack restarted) the tenant header.
  const first = await admin('POST', '/register', { engineUrl: engineOpsUrl, registrationToken: secret('registration.token') });
  if (first.status === 200) return;
  const again = await admin('POST', '/register', { engineUrl: engineOpsUrl, currentTenantId: tenantId });
  if (again.status !== 200) throw new Error(`register: ${first.status} ${JSON.stringify(first.body)} / ${again.status}`);
});
console.log(`provision: tenant ${tenantId} registered with the engine at ${engineOpsUrl}`);
