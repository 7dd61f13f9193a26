import { defineConfig } from 'vitest/config';

// Unit tests of the client without an engine; the tests against the real engine process are in
// integration-tests/test/client.test.ts.
export default defineConfig({
  test: {
    name: 'client',
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
  },
});
