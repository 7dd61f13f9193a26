// The harness itself: the run's PostgreSQL answers, per-suite databases come and go, detection never hangs.
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, detectContainerRuntime, dropDatabase, redact, withClient } from '../src/postgres-harness.js';

const adminUrl = inject('databaseUrl');

describe('postgres harness', () => {
  afterAll(() => dropDatabase(adminUrl, 'svc_harness_check'));

  it('hands the tests a superuser URL of a running server', async () => {
    const row = await withClient(
      adminUrl,
      async (c) => (await c.query('SELECT current_setting($1) AS su', ['is_superuser'])).rows[0],
    );
    expect(row.su).toBe('on');
    expect(['env', 'container', 'local']).toContain(inject('databaseSource'));
  });

  it('creates a fresh database each time it is asked for one', async () => {
    const url = await createDatabase(adminUrl, 'svc_harness_check');
    await withClient(url, (c) => c.query('CREATE TABLE leftover (id int)'));
    const again = await createDatabase(adminUrl, 'svc_harness_check');
    const tables = await withClient(
      again,
      async (c) => (await c.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'leftover'")).rows[0].n,
    );
    expect(tables).toBe(0);
  });

  it('reports an absent container runtime instead of waiting for it', async () => {
    const saved = process.env.DOCKER_HOST;
    process.env.DOCKER_HOST = 'unix:///nonexistent/docker.sock';
    try {
      const result = await detectContainerRuntime(500);
      expect(result).toEqual({ available: false, reason: 'no socket at /nonexistent/docker.sock' });
    } finally {
      if (saved === undefined) delete process.env.DOCKER_HOST;
      else process.env.DOCKER_HOST = saved;
    }
  });

  it('hides passwords when it names a URL', () => {
    expect(redact('postgres://admin:s3cret@db:5432/x')).toBe('postgres://admin:***@db:5432/x');
  });
});
