// The snapshot store contract on the embedded driver (in-memory PGlite, migrations applied per test).
import { silentLogger } from '../src/store/logger.js';
import { openDb } from '../src/store/open-store.js';
import { describeStoreContract } from './store-contract.js';

describeStoreContract('PGlite', { open: () => openDb({}, silentLogger) });
