// The takeover of an unregistered engine, with real processes: a stranger runs a reference hub of
// their own (their own master key, no keys) and registers the engine first. On a shared listener
// without a pin the registration succeeds, but the stranger's empty snapshot is held back and old
// ciphertexts still decrypt after a restart; with SVC_HUB_URL the registration itself is refused.
import { randomBytes } from 'node:crypto';
import { afterEach, expect, it } from 'vitest';
import { engineClient, eventually } from '../src/engine-client.js';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { type RunningHub, startHub } from '../src/hub-process.js';
import { testBootstrap } from '../src/test-policies.js';

const STRANGER = 'tenant-stranger';
const running: (RunningEngine | RunningHub)[] = [];

afterEach(async () => {
  for (const proc of running.splice(0)) await proc.dispose();
});

async function strangerHub(): Promise<RunningHub> {
  const hub = await startHub();
  running.push(hub);
  await hub.admin('PUT', `/tenants/${STRANGER}`, { masterKey: randomBytes(32).toString('base64') });
  return hub;
}

it('holds back a stranger hub empty snapshot; old ciphertexts still decrypt after a restart', async () => {
  const engine = await startEngine({
    bootstrap: testBootstrap(),
    env: { SVC_OPS_SHARED: 'true', SVC_HUB_HEARTBEAT_INTERVAL_MS: '200' },
  });
  running.push(engine);
  const client = engineClient(engine.url, STRANGER, engine.opsUrl);
  const sealed = await client.encrypt('alice@example.com', 'PII_EMAIL');
  const stranger = await strangerHub();
  await stranger.admin('POST', `/tenants/${STRANGER}/register`, { engineUrl: engine.opsUrl });
  await eventually('the stranger snapshot is held back', async () => (await client.info()).heldBackSnapshot !== null);
  const info = await client.info();
  expect(info.heldBackSnapshot).toMatchObject({ keyCount: 0, policyCount: 0 });
  expect(info.cache.keyCount).toBeGreaterThan(0);
  expect(info.runtimeVersion).toBe('integration-tests');
  expect(await client.decrypt(sealed)).toBe('alice@example.com');
  expect(await client.encrypt('still served', 'PII_EMAIL')).toMatch(/^hub:PII_EMAIL:/);
  await engine.restart();
  expect(await client.decrypt(sealed)).toBe('alice@example.com');
});

it('refuses the stranger registration outright when the engine is pinned to its hub', async () => {
  const engine = await startEngine({ bootstrap: testBootstrap(), env: { SVC_HUB_URL: 'https://hub.example' } });
  running.push(engine);
  const stranger = await strangerHub();
  await expect(stranger.admin('POST', `/tenants/${STRANGER}/register`, { engineUrl: engine.opsUrl })).rejects.toThrow(
    /answered 409.*not the hub this engine is pinned to/,
  );
  const unregistered = await fetch(`${engine.opsUrl}/engine/api/v1/runtime/info`);
  expect(unregistered.status).toBe(503);
});
