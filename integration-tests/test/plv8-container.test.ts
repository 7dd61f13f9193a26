// plv8 end to end: the full docker/postgres.Dockerfile image (plv8 + http) through testcontainers, the
// migrations applied with svc.bridge = plv8, against the engine running on the host. It runs only where
// a container runtime answers (probed before the tests are collected); elsewhere it is reported as
// skipped with the probe's reason, and a check that the probe was right always runs, so a runtime that
// exists is never silently passed over.
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { detectContainerRuntime, REPO_ROOT, type RunningPostgres, startContainer, withClient } from '../src/postgres-harness.js';
import { applyMigrations, setEngineServer } from '../src/sql-install.js';
import { POLICIES, testBootstrap } from '../src/test-policies.js';

const runtime = await detectContainerRuntime();
const skipped = runtime.available ? '' : ` (skipped: no container runtime answers: ${runtime.reason})`;
if (!runtime.available) console.warn(`plv8 end-to-end test skipped: container runtime not available (${runtime.reason})`);

describe('container runtime probe', () => {
  it('agrees with the machine: a runtime reported missing has no socket or does not answer', () => {
    if (runtime.available) {
      expect(runtime.reason).toBe('ping answered');
      return;
    }
    const host = process.env.DOCKER_HOST;
    const socket = host?.startsWith('unix://') ? host.slice('unix://'.length) : '/var/run/docker.sock';
    if (runtime.reason.startsWith('no socket at')) expect(existsSync(socket)).toBe(false);
    else expect(runtime.reason).not.toBe('');
  });
});

describe('plv8 bridge end to end in a container', () => {
  let engine: RunningEngine | undefined;
  let postgres: RunningPostgres | undefined;
  afterAll(async () => {
    await postgres?.stop();
    await engine?.dispose();
  });

  it.skipIf(!runtime.available)(`round-trips and reports errors through plv8 and the http extension${skipped}`, async () => {
    const plv8Git = process.env.PLV8_GIT;
    expect(plv8Git, 'set PLV8_GIT to the plv8 git repository URL to build the plv8 image').toBeTruthy();
    engine = await startEngine({ bootstrap: testBootstrap(), env: { SVC_HOST: '0.0.0.0' } });
    const { TestContainers } = await import('testcontainers');
    await TestContainers.exposeHostPorts(engine.port);
    postgres = await startContainer({
      containerDockerfile: { context: REPO_ROOT, file: 'docker/postgres.Dockerfile', buildArgs: { PLV8_GIT: plv8Git as string } },
    });
    const url = postgres.adminUrl;
    await applyMigrations(url, { 'svc.bridge': 'plv8' });
    await setEngineServer(url, { url: `http://host.testcontainers.internal:${engine.port}` });
    await withClient(url, async (c) => {
      const lang = (await c.query("SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'svc__encrypt'")).rows[0]?.lanname;
      expect(lang).toBe('plv8');
      const enc = (await c.query('SELECT svc_encrypt($1, $2) AS c', ['through plv8', POLICIES.random])).rows[0]?.c;
      expect((await c.query('SELECT svc_decrypt($1) AS p', [enc])).rows[0]?.p).toBe('through plv8');
      const arr = (await c.query('SELECT svc_decrypt(svc_encrypt(ARRAY[$1, NULL, $2], $3)) AS a', ['a', 'b', POLICIES.deterministic])).rows[0]?.a;
      expect(arr).toEqual(['a', null, 'b']);
      const error = await c.query("SELECT svc_encrypt('x', 'NO_SUCH_POLICY')").then(
        () => undefined,
        (e: { code?: string; message: string }) => e,
      );
      expect(error).toMatchObject({ code: 'SV001' });
      expect(error?.message).toContain('policy not found: NO_SUCH_POLICY');
    });
  }, 3_600_000);
});
