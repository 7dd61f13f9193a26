import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    name: 'engine',
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    // Hooks open PGlite (PostgreSQL in WebAssembly) and apply migrations: seconds alone, more while the
    // end-to-end tests load both cores.
    hookTimeout: 60_000,
  },
});
