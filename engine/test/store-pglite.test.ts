// The snapshot store contract on the embedded driver (in-memory PGlite, migrations applied once),
// and the on-disk form the engine uses by default.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
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
