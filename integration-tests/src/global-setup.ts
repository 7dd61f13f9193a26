// Vitest global setup: one PostgreSQL for the whole run, handed to the test files with provide/inject.
// Fails the run (never skips it) when no PostgreSQL can be had; the error says why.
import type { TestProject } from 'vitest/node';
import { startPostgres } from './postgres-harness.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the run's PostgreSQL (maintenance database). */
    databaseUrl: string;
    /** Where it came from: env (TEST_DATABASE_URL), container or local (throwaway cluster). */
    databaseSource: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const postgres = await startPostgres();
  console.log(
    `integration tests: PostgreSQL from ${postgres.source}${postgres.notes.length ? ` (${postgres.notes.join('; ')})` : ''}`,
  );
  project.provide('databaseUrl', postgres.adminUrl);
  project.provide('databaseSource', postgres.source);
  return () => postgres.stop();
}
