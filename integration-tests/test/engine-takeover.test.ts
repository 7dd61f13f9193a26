// The takeover of an unregistered engine, with real processes: a stranger runs a reference hub of
// their own (their own master key, no keys) and registers the engine first. On a shared listener
// without a pin the registration succeeds, but the stranger's empty snapshot is held back and old
// ciphertexts still decrypt after a restart; with SVC_HUB_URL the registration itself is refused, and an
// engine registered elsewhere before the pin refuses to start. Unprotected, the engine says so at start.
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

it('refuses to start when the stored identity names another hub than SVC_HUB_URL, naming both and the way back', async () => {
  const masterKey = randomBytes(32).toString('base64');
  const before = await startEngine({ bootstrap: testBootstrap(), env: { SVC_MASTER_KEY: masterKey } });
  running.push(before);
  const registered = await fetch(`${before.opsUrl}/engine/api/v1/runtime/identity`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ hubUrl: 'http://127.0.0.1:9', tenantId: STRANGER }),
  });
  expect(registered.status).toBe(200);
  await before.stop();
  const failure = await startEngine({
    bootstrap: testBootstrap(),
    dataDir: before.dataDir,
    env: { SVC_MASTER_KEY: masterKey, SVC_HUB_URL: 'https://hub.example' },
  }).then(
    (pinned) => {
      running.push(pinned);
      return 'started';
    },
    (error: Error) => error.message,
  );
  expect(failure).toContain(
    'the stored runtime identity names hub http://127.0.0.1:9, not SVC_HUB_URL (https://hub.example): reset the identity (docs/operations.md#post-runtimeidentity) and register again',
  );
});

it('warns at start, outside dev mode, when neither SVC_HUB_URL nor a registration token protects the first registration', async () => {
  const warning = 'unregistered and neither SVC_HUB_URL nor SVC_REGISTRATION_TOKEN is set: whoever reaches the operations listener first may register this engine';
  // The warning comes before the listeners, 'operations API listening' after them: once that line is in
  // the output, so is the warning if there is one.
  const started = async (env: Record<string, string>) => {
    const engine = await startEngine({ bootstrap: testBootstrap(), env });
    running.push(engine);
    await eventually('the operations listener is logged', async () => engine.output().includes('operations API listening'));
    return engine.output();
  };
  expect(await started({})).toContain(warning);
  expect(await started({ SVC_HUB_URL: 'https://hub.example' })).not.toContain(warning);
  expect(await started({ SVC_REGISTRATION_TOKEN: 'a-registration-token-0123456789' })).not.toContain(warning);
});
