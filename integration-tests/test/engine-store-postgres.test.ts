// The snapshot store contract (engine/test/store-contract.ts) on a real PostgreSQL through
// DATABASE_URL's driver (node-postgres pool), the same tests the unit suite runs on PGlite.
import { afterAll, inject } from 'vitest';
import { silentLogger } from '../../engine/src/store/logger.js';
import { openDb } from '../../engine/src/store/open-store.js';
import { describeStoreContract } from '../../engine/test/store-contract.js';
import { createDatabase, dropDatabase } from '../src/postgres-harness.js';

const adminUrl = inject('databaseUrl');
const DB = 'svc_engine_store_it';

describeStoreContract('PostgreSQL', {
  open: async () => openDb({ databaseUrl: await createDatabase(adminUrl, DB) }, silentLogger),
});

afterAll(() => dropDatabase(adminUrl, DB));
