import { defineConfig } from 'vitest/config';

// One command runs every workspace's tests: the engine's and the client's unit tests and the end-to-end tests.
export default defineConfig({
  test: {
    projects: ['engine', 'client', 'integration-tests'],
  },
});
