// The engine image's file tree, assembled by docker/assemble.sh (the script the Dockerfile runs), started
// as processes the way the compose stack starts it: keygen writes the secrets, the reference hub and the
// engine run from the tree, provision registers the engine with the hub, and readiness turns from 503 to
// 200. No container engine is needed; what the container adds (the user, the read-only root) is checked
// here as "nothing is written outside the data directory".
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NodeProcess, nodeProcess } from '../src/node-process.js';
import { freePort, REPO_ROOT } from '../src/postgres-harness.js';

const run = promisify(execFile);

let work: string;
let tree: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'svc-image-tree-'));
  tree = join(work, 'app');
  await run('sh', [join(REPO_ROOT, 'docker', 'assemble.sh'), tree], { cwd: REPO_ROOT, timeout: 170_000 });
}, 180_000);
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** Every file and directory under dir with its size and modification time. */
function listing(dir: string): Map<string, string> {
  const entries = new Map<string, string>();
  for (const name of readdirSync(dir, { recursive: true }) as string[]) {
    const stat = statSync(join(dir, name), { throwIfNoEntry: false });
    if (stat) entries.set(name, `${stat.size}:${stat.mtimeMs}`);
  }
  return entries;
}

function packageVersion(dir: string): string {
  return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
}

describe('the image file tree (docker/assemble.sh)', () => {
  it('holds the built engine, its migrations and production dependencies only', async () => {
    const top = await readdir(tree);
    expect(top.sort()).toEqual(['engine', 'node_modules', 'package.json', 'scripts']);
    const files = [...listing(tree).keys()];
    expect(files).toContain('engine/dist/main.js');
    expect(files).toContain('engine/dist/reference-hub/main.js');
    expect(files.some((f) => f.startsWith('engine/drizzle/migrations/') && f.endsWith('.sql'))).toBe(true);
    expect(files.filter((f) => f.endsWith('.d.ts') && f.startsWith('engine/dist'))).toEqual([]);
    // No development tools, no test workspaces, no data or keys.
    const modules = await readdir(join(tree, 'node_modules'));
    for (const tool of ['vitest', 'typescript', 'eslint', 'drizzle-kit', 'testcontainers', 'tsx']) expect(modules).not.toContain(tool);
    expect(files.filter((f) => /(^|\/)(data|\.git)(\/|$)|\.key$/.test(f))).toEqual([]);
  });

  it('resolves the engine\'s own pino (9.x), not the one another package pulls in', () => {
    const declared = (JSON.parse(readFileSync(join(REPO_ROOT, 'engine', 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    }).dependencies.pino ?? '';
    const major = declared.replace(/^\D*/, '').split('.')[0];
    expect(packageVersion(join(tree, 'engine', 'node_modules', 'pino')).split('.')[0]).toBe(major);
  });

  it('runs the compose stack\'s sequence from the tree and writes only to the data directories', async () => {
    const secrets = join(work, 'secrets');
    const data = join(work, 'data');
    const hubData = join(work, 'hub-data');
    const home = await mkdtemp(join(work, 'home-'));
    const tmp = await mkdtemp(join(work, 'tmp-'));
    // The image has these directories (owned by its user); the volumes are mounted on them.
    await mkdir(hubData);
    await mkdir(data, { mode: 0o700 });
    const before = listing(tree);
    // A bare environment, as in the image: nothing inherited from the test run but PATH.
    const base = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, TMPDIR: tmp, NODE_ENV: 'production' };

    await run(process.execPath, ['scripts/keygen.mjs', secrets], { cwd: tree, env: base });
    const masterKey = readFileSync(join(secrets, 'master.key'), 'utf8').trim();
    const token = readFileSync(join(secrets, 'registration.token'), 'utf8').trim();
    expect(Buffer.from(masterKey, 'base64')).toHaveLength(32);
    expect(statSync(join(secrets, 'master.key')).mode & 0o077).toBe(0);

    const hubPort = await freePort();
    const hubUrl = `http://127.0.0.1:${hubPort}`;
    const hub = nodeProcess({
      name: 'hub',
      main: join(tree, 'engine', 'dist', 'reference-hub', 'main.js'),
      cwd: tree,
      env: {
        ...base,
        SVC_HUB_HOST: '127.0.0.1',
        SVC_HUB_PORT: String(hubPort),
        SVC_HUB_PUBLIC_URL: hubUrl,
        SVC_HUB_STATE_FILE: join(hubData, 'hub-state.json'),
        SVC_LOG_LEVEL: 'warn',
      },
      healthUrl: `${hubUrl}/hub/health`,
      startTimeoutMs: 30_000,
    });
    const port = await freePort();
    const opsPort = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const engine = nodeProcess({
      name: 'engine',
      main: join(tree, 'engine', 'dist', 'main.js'),
      cwd: tree,
      env: {
        ...base,
        SVC_HOST: '127.0.0.1',
        SVC_PORT: String(port),
        SVC_OPS_HOST: '127.0.0.1',
        SVC_OPS_PORT: String(opsPort),
        SVC_DATA_DIR: data,
        SVC_MASTER_KEY_FILE: join(secrets, 'master.key'),
        SVC_REGISTRATION_TOKEN_FILE: join(secrets, 'registration.token'),
        SVC_HUB_URL: hubUrl,
        SVC_HUB_HEARTBEAT_INTERVAL_MS: '1000',
        SVC_LOG_LEVEL: 'info',
      },
      // Liveness first: the engine answers before it has anything to serve.
      healthUrl: `${url}/api/health`,
      startTimeoutMs: 30_000,
    });
    const processes: NodeProcess[] = [hub, engine];
    try {
      await hub.start();
      await engine.start();

      const notReady = await fetch(`${url}/api/health/ready`);
      expect(notReady.status).toBe(503);
      expect(await notReady.json()).toEqual({ error: 'crypto service is not configured' });
      // The image's HEALTHCHECK (and the sidecar's exec probes) say the same.
      const probe = (path: string) =>
        run(process.execPath, ['scripts/probe.mjs', path], { cwd: tree, env: { ...base, SVC_PORT: String(port) } }).then(
          () => 0,
          (error: { code?: number }) => error.code,
        );
      expect(await probe('/api/health/ready')).toBe(1);
      expect(await probe('/api/health')).toBe(0);

      const provisionEnv = {
        ...base,
        SVC_HUB_URL: hubUrl,
        SVC_ENGINE_OPS_URL: `http://127.0.0.1:${opsPort}`,
        SVC_TENANT_ID: 'demo',
        SVC_SECRETS_DIR: secrets,
      };
      await run(process.execPath, ['scripts/provision.mjs'], { cwd: tree, env: provisionEnv, timeout: 60_000 });

      let ready: Response | undefined;
      for (let attempt = 0; attempt < 200 && ready?.status !== 200; attempt++) {
        if (attempt > 0) await new Promise((r) => setTimeout(r, 100));
        ready = await fetch(`${url}/api/health/ready`);
      }
      expect(ready?.status).toBe(200);
      expect(await ready?.json()).toEqual({ status: 'UP', policyCount: 2, keyCount: 2 });
      expect(await probe('/api/health/ready')).toBe(0);

      for (const policyCode of ['DEMO_RANDOM', 'DEMO_DETERMINISTIC']) {
        const enc = await fetch(`${url}/api/encrypt`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ data: 'alice@example.com', policyCode }),
        }).then((r) => r.json() as Promise<{ data: string }>);
        const dec = await fetch(`${url}/api/decrypt`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ data: enc.data }),
        }).then((r) => r.json());
        expect(dec).toEqual({ success: true, data: 'alice@example.com', policyCode });
      }

      // A restarted stack runs provision again: it keeps what exists and still succeeds.
      await run(process.execPath, ['scripts/provision.mjs'], { cwd: tree, env: provisionEnv, timeout: 60_000 });
      // The operations API stays on its own listener, not on the execution port.
      expect((await fetch(`${url}/engine/api/v1/cache/status`)).status).toBe(404);
    } finally {
      for (const p of processes) await p.kill('SIGTERM', 10_000);
    }

    expect(engine.output()).not.toContain(masterKey);
    expect(engine.output()).not.toContain(token);
    expect(hub.output()).not.toContain(token);
    // Nothing written into the tree (the image's read-only root), the home or the temporary directory.
    const after = listing(tree);
    const changed = [...after].filter(([name, stamp]) => before.get(name) !== stamp).map(([name]) => name);
    expect(changed).toEqual([]);
    expect([...before.keys()].filter((name) => !after.has(name))).toEqual([]);
    expect(await readdir(home)).toEqual([]);
    expect(await readdir(tmp)).toEqual([]);
    expect((await readdir(data)).length).toBeGreaterThan(0);
  }, 120_000);
});
