import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockDirectory, lockFileOf } from '../src/store/directory-lock.js';

let root: string;
let dir: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-lock-'));
  dir = join(root, 'store');
});
afterEach(() => rm(root, { recursive: true, force: true }));

/** A live process other than this one and its parent, ended by the returned function. */
function otherProcess(lifetimeMs: number) {
  const child = spawn(process.execPath, ['-e', `setTimeout(() => {}, ${lifetimeMs})`], { stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return { pid: child.pid as number, end: async () => (child.kill(), exited), exited };
}

describe('the embedded store directory lock', () => {
  it('is held by one process at a time: a second taker waits until it is released', async () => {
    const release = await lockDirectory(dir);
    expect((await readFile(lockFileOf(dir), 'utf8')).trim()).toBe(String(process.pid));
    release();
    await expect(readFile(lockFileOf(dir))).rejects.toThrow(/ENOENT/);
    (await lockDirectory(dir))();
  });

  it('waits for a live owner that ends, then takes the lock', async () => {
    const owner = otherProcess(400);
    await writeFile(lockFileOf(dir), `${owner.pid}\n`);
    const started = Date.now();
    const release = await lockDirectory(dir, 10_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    await owner.exited;
    expect((await readFile(lockFileOf(dir), 'utf8')).trim()).toBe(String(process.pid));
    release();
  });

  it('refuses, naming the lock file, while a live owner keeps it past the wait', async () => {
    const owner = otherProcess(30_000);
    try {
      await writeFile(lockFileOf(dir), `${owner.pid}\n`);
      await expect(lockDirectory(dir, 300)).rejects.toThrow(
        `in use by process ${owner.pid} (lock file ${lockFileOf(dir)})`,
      );
      expect((await readFile(lockFileOf(dir), 'utf8')).trim()).toBe(String(owner.pid));
    } finally {
      await owner.end();
    }
  });

  it('takes over the lock of a process that is gone, or of this process id from a previous run', async () => {
    const gone = otherProcess(0);
    await gone.exited;
    for (const stale of [String(gone.pid), String(process.pid), 'garbage']) {
      await writeFile(lockFileOf(dir), `${stale}\n`);
      const release = await lockDirectory(dir, 300);
      expect((await readFile(lockFileOf(dir), 'utf8')).trim()).toBe(String(process.pid));
      release();
    }
  });
});
