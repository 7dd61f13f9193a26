// Starting PGlite, apart from the rest of the store so that starting it loads nothing else: its
// WebAssembly compiles in the background while drizzle and the store load (store-process.ts).
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { lockDirectory } from './directory-lock.js';

export type PGliteClient = InstanceType<typeof import('@electric-sql/pglite').PGlite>;

/**
 * Starts PGlite on a directory (or in memory). Its WebAssembly compiles in the background, so the
 * embedded store's process calls this first and loads the rest while it does (store-process.ts).
 */
export async function startPglite(dir: string | undefined): Promise<PGliteClient> {
  const { PGlite } = await import('@electric-sql/pglite');
  // PGlite creates its own directory but not the parents (the data directory may not exist yet).
  if (dir === undefined) return new PGlite();
  await mkdir(dirname(dir), { recursive: true, mode: 0o700 });
  // Never two PGlite on one directory (directory-lock.ts); the lock goes with close or the process.
  const release = await lockDirectory(dir);
  let client: PGliteClient;
  try {
    client = new PGlite(dir);
  } catch (error) {
    release();
    throw error;
  }
  const close = client.close.bind(client);
  client.close = () => close().finally(release);
  return client;
}
