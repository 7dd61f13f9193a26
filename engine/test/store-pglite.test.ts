// The snapshot store contract on the embedded driver (in-memory PGlite, migrations applied once),
// and the on-disk form the engine uses by default.
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { silentLogger } from '../src/store/logger.js';
import { openDb } from '../src/store/open-store.js';
import { SnapshotStore } from '../src/store/snapshot-store.js';
import { describeStoreContract } from './store-contract.js';

describeStoreContract('PGlite', { open: () => openDb({}, silentLogger) });

it('creates its directory inside a data directory that does not exist yet, and reopens it', async () => {
  const root = await mkdtemp(join(tmpdir(), 'svc-pglite-'));
  const dir = join(root, 'not-yet', 'store');
  const masterKey = randomBytes(32);
  try {
    const first = await openDb({ pgliteDir: dir }, silentLogger);
    await new SnapshotStore(first, 'default', masterKey).saveIdentity({ hubUrl: 'http://hub:1', tenantId: 't' });
    await first.close();
    const second = await openDb({ pgliteDir: dir }, silentLogger);
    expect((await new SnapshotStore(second, 'default', masterKey).load()).identity).toEqual({
      hubUrl: 'http://hub:1',
      tenantId: 't',
    });
    await second.close();
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

/** Every directory and file under `dir` (itself included) with its permission bits. */
async function modes(dir: string): Promise<{ dirs: Map<string, number>; files: Map<string, number> }> {
  const dirs = new Map([[dir, (await stat(dir)).mode & 0o777]]);
  const files = new Map<string, number>();
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    const path = join(entry.parentPath, entry.name);
    if (entry.isDirectory()) dirs.set(path, (await stat(path)).mode & 0o777);
    else if (entry.isFile()) files.set(path, (await stat(path)).mode & 0o777);
  }
  return { dirs, files };
}

it('makes an existing store with 0640 files and 0755 directories private at open: 0600 and 0700', async () => {
  const root = await mkdtemp(join(tmpdir(), 'svc-pglite-modes-'));
  const dir = join(root, 'store');
  try {
    await (await openDb({ pgliteDir: dir }, silentLogger)).close();
    // What an older engine (or PGlite's own chmod) left behind.
    const before = await modes(dir);
    for (const path of before.dirs.keys()) await chmod(path, 0o755);
    for (const path of before.files.keys()) await chmod(path, 0o640);
    expect(before.files.size).toBeGreaterThan(10);

    await (await openDb({ pgliteDir: dir }, silentLogger)).close();
    const after = await modes(dir);
    expect([...after.dirs].filter(([, mode]) => mode !== 0o700)).toEqual([]);
    expect([...after.files].filter(([, mode]) => mode !== 0o600)).toEqual([]);
    expect(after.files.size).toBeGreaterThanOrEqual(before.files.size);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
