// The heartbeat loop: backoff with jitter while the hub is down, and an engine that started OFFLINE
// turning ONLINE by itself once the hub answers.
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { backoffDelay, HeartbeatLoop } from '../src/hub/heartbeat-loop.js';
import { silentLogger } from '../src/store/logger.js';
import { closeSharedDb, HUB_URL, type HubWorld, hubWorld, TENANT } from './support/hub-fixtures.js';

let world: HubWorld | undefined;
let loop: HeartbeatLoop | undefined;

afterEach(async () => {
  await loop?.stop();
  await world?.close();
  loop = undefined;
  world = undefined;
});

afterAll(closeSharedDb);

describe('backoff', () => {
  const options = { intervalMs: 30_000, backoffMaxMs: 60_000 };

  it('doubles from one second, with jitter between half and all of the step', () => {
    expect(backoffDelay(1, { ...options, random: () => 0 })).toBe(500);
    expect(backoffDelay(1, { ...options, random: () => 1 })).toBe(1000);
    expect(backoffDelay(4, { ...options, random: () => 0 })).toBe(4000);
    expect(backoffDelay(4, { ...options, random: () => 1 })).toBe(8000);
  });

  it('never exceeds the configured maximum, however long the outage', () => {
    for (const failures of [7, 20, 1000]) {
      expect(backoffDelay(failures, { ...options, random: () => 1 })).toBe(60_000);
      expect(backoffDelay(failures, { ...options, random: () => 0 })).toBe(30_000);
    }
  });

  it('starts below the heartbeat interval when the interval is short', () => {
    expect(backoffDelay(1, { intervalMs: 100, backoffMaxMs: 1000, random: () => 1 })).toBe(100);
  });
});

describe('heartbeat loop', () => {
  it('starts OFFLINE while the hub is down and turns ONLINE by itself when it comes back', async () => {
    world = await hubWorld();
    world.hubControl.down = true;
    loop = new HeartbeatLoop(world.agent, { intervalMs: 20, backoffMaxMs: 40 }, silentLogger);
    loop.start();
    await vi.waitFor(() => expect(world?.agent.lastHeartbeatError).toMatch(/ECONNREFUSED/));
    expect(world.agent.status).toBe('OFFLINE');
    world.hubControl.down = false;
    await vi.waitFor(() => expect(world?.agent.status).toBe('ONLINE'), { timeout: 5000 });
    // ONLINE is set when the hub answers; its snapshot is applied next, in slices (a moment later).
    await vi.waitFor(() => expect(world?.manager.cache.current.configured).toBe(true), { timeout: 5000 });
  });

  it('stays idle until registered, then beats at once', async () => {
    world = await hubWorld({ registered: false });
    loop = new HeartbeatLoop(world.agent, { intervalMs: 60_000, backoffMaxMs: 60_000 }, silentLogger);
    loop.start();
    expect(world.agent.status).toBe('UNREGISTERED');
    await world.agent.register({ hubUrl: HUB_URL, tenantId: TENANT }, undefined);
    await vi.waitFor(() => expect(world?.agent.status).toBe('ONLINE'), { timeout: 5000 });
  });
});
