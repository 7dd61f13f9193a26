// The committed migrations must match the drizzle schema: drizzle-kit, run on a copy of them, finds
// nothing to generate. Otherwise a schema change shipped without its migration would only fail in
// production, when the engine's queries meet an old table.
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const ENGINE = resolve(import.meta.dirname, '..');
const KIT = resolve(ENGINE, '..', 'node_modules', '.bin', 'drizzle-kit');

it('has a committed migration for every change of the drizzle schema', async () => {
  const out = await mkdtemp(join(tmpdir(), 'svc-migrations-'));
  try {
    await cp(join(ENGINE, 'drizzle', 'migrations'), out, { recursive: true });
    const before = await readdir(out);
    const { stdout, stderr } = await promisify(execFile)(
      KIT,
      // drizzle-kit reads --out relative to the working directory.
      ['generate', '--dialect', 'postgresql', '--schema', 'src/store/schema.ts', '--out', relative(ENGINE, out)],
      { cwd: ENGINE },
    );
    expect(stdout + stderr).toContain('No schema changes');
    expect(await readdir(out)).toEqual(before);
  } finally {
    await rm(out, { recursive: true, force: true });
  }
});
