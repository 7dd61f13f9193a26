// Key material never leaves the engine in plaintext: after syncs (wrapped and refused raw), a hub
// heartbeat, execution calls and info/metrics reads, neither the logs (at trace level), nor any
// response, nor any table of the store holds the raw key bytes, their hex or their base64.
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, expect, it } from 'vitest';
import { wrapKey } from '../src/core/key-wrap.js';
import { closeSharedDb, sharedDb, TENANT } from './support/hub-fixtures.js';
import { OPS, type OperationsWorld, operationsWorld } from './support/operations-fixtures.js';
import { dumpTables } from './store-contract.js';

let w: OperationsWorld | undefined;

afterEach(async () => {
  await w?.close();
  w = undefined;
});

afterAll(closeSharedDb);

function forms(material: Uint8Array): string[] {
  const bytes = Buffer.from(material);
  return [bytes.toString('hex'), bytes.toString('base64'), bytes.toString('base64url'), bytes.toString('latin1')];
}

it('never writes key material to logs, responses or the store after syncs and a heartbeat', async () => {
  w = await operationsWorld();
  const headers = { 'x-svc-tenant-id': TENANT, 'content-type': 'application/json' };
  const synced = randomBytes(32);
  const refused = randomBytes(32);
  const bodies: string[] = [];
  const send = async (method: 'GET' | 'POST', url: string, payload?: unknown) => {
    const response = await w?.engine.app.inject({ method, url, headers, payload: payload as object });
    bodies.push(response?.body ?? '');
    return response;
  };
  const wrapped = wrapKey(w.masterKey, synced).toString('base64');
  const keyRecord = { alias: 'secret-gcm', version: 1, algorithm: 'AES-256-GCM', wrappedMaterial: wrapped };
  expect((await send('POST', `${OPS}/cache/keys/sync`, { key: keyRecord }))?.statusCode).toBe(200);
  const raw = { alias: 'secret-gcm', version: 2, algorithm: 'AES-256-GCM', material: refused.toString('base64') };
  expect((await send('POST', `${OPS}/cache/keys/sync`, { key: raw }))?.statusCode).toBe(400);
  await send('POST', `${OPS}/cache/policies/sync`, {
    policy: { policyCode: 'SECRET', algorithm: 'AES-256-GCM', keyAlias: 'secret-gcm' },
  });
  expect((await send('POST', `${OPS}/runtime/heartbeat`))?.statusCode).toBe(200);
  await send('POST', '/api/encrypt', { data: 'x', policyCode: 'PII_EMAIL' });
  await send('GET', `${OPS}/runtime/info`);
  await send('GET', `${OPS}/cache/sync-check`);
  await send('GET', '/metrics');
  await w.manager.flushState();

  const hubMaterial = w.hubState.tenant(TENANT).keys.get('pii-gcm')?.[0]?.material;
  expect(hubMaterial).toBeDefined();
  const logs = w.logs.join('');
  expect(logs).toContain('applied the runtime snapshot from the hub');
  const tables = await dumpTables(await sharedDb());
  expect(tables).toContain('secret-gcm');
  for (const material of [synced, refused, hubMaterial as Uint8Array]) {
    for (const form of forms(material)) {
      expect(logs).not.toContain(form);
      expect(tables).not.toContain(form);
      for (const body of bodies) expect(body).not.toContain(form);
    }
  }
});
