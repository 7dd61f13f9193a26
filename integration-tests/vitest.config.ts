import { defineConfig } from 'vitest/config';

// End-to-end tests across real processes: one PostgreSQL per run (global setup), test files one at a time
// because they share that server and start engine processes on a two-core machine.
export default defineConfig({
  test: {
    name: 'integration-tests',
    include: ['test/**/*.test.ts'],
    globalSetup: ['src/global-setup.ts'],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
  },
});
