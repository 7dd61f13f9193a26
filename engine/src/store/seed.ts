// What feeds the store without a hub, at start: a bootstrap file (its records are upserted, so a
// restart never drops keys synced since) or dev mode's demo policies (generated once, then persisted
// wrapped like any key). A plain dev bootstrap file left by earlier versions is imported and removed,
// so no raw key stays on disk.
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describeJsonError, generateDevBootstrap, parseBootstrap } from '../core/bootstrap.js';
import type { CacheManager } from './cache-manager.js';
import { wrappedMaterialReader } from './key-material.js';
import type { Logger } from './logger.js';

export interface SeedOptions {
  readonly bootstrapFile?: string;
  readonly devMode: boolean;
  readonly dataDir: string;
  readonly masterKey: Uint8Array;
}

const LEGACY_DEV_FILE = 'dev-bootstrap.json';

async function readJson(path: string, what: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new Error(`${what}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${what}: ${path} is not valid JSON at ${describeJsonError(text) ?? 'an unknown position'}`);
  }
}

async function upsertDocument(manager: CacheManager, doc: unknown, masterKey: Uint8Array): Promise<void> {
  // The file is the operator's own: raw material is accepted there, wrappedMaterial too.
  const content = parseBootstrap(doc, wrappedMaterialReader(masterKey, true));
  await manager.apply({
    policies: { mode: 'upsert', records: content.policies },
    keys: { mode: 'upsert', records: content.keys },
    runtimeVersion: content.runtimeVersion,
  });
}

const DEV_VERSIONS_FILE = 'dev-key-versions.json';
const DEMO_ALIASES = ['demo-gcm', 'demo-siv'];

/**
 * A demo key version no ciphertext can name yet: above every version the store knows (retired and
 * destroyed ones included), above the last one generated in this data directory (the store may have
 * been lost), and at least the current Unix time in seconds (the whole data directory may have been).
 */
async function freshDevVersion(manager: CacheManager, dataDir: string): Promise<number> {
  const snapshot = manager.cache.current;
  const known = [...snapshot.keys, ...snapshot.destroyed]
    .filter((k) => DEMO_ALIASES.includes(k.alias))
    .map((k) => k.version);
  const file = join(dataDir, DEV_VERSIONS_FILE);
  const recorded = await readFile(file, 'utf8').then(
    (text) => Number((JSON.parse(text) as { lastVersion?: unknown }).lastVersion) || 0,
    () => 0,
  );
  const version = Math.max(Math.max(0, ...known, recorded) + 1, Math.floor(Date.now() / 1000));
  if (version > 0xffff_ffff) throw new Error('dev mode: no demo key version left; remove the data directory');
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await writeFile(file, `${JSON.stringify({ lastVersion: version })}\n`, { mode: 0o600 });
  return version;
}

export async function seed(manager: CacheManager, options: SeedOptions, log: Logger): Promise<void> {
  if (options.bootstrapFile) {
    await upsertDocument(manager, await readJson(options.bootstrapFile, 'SVC_BOOTSTRAP_FILE'), options.masterKey);
    const snapshot = manager.cache.current;
    log.info({ policies: snapshot.policyCount, keys: snapshot.keyCount }, 'applied the bootstrap file to the store');
    return;
  }
  if (!options.devMode) return;
  const legacy = join(options.dataDir, LEGACY_DEV_FILE);
  const legacyDoc = await readJson(legacy, 'dev bootstrap').catch(() => undefined);
  if (legacyDoc !== undefined) {
    await upsertDocument(manager, legacyDoc, options.masterKey);
    await rm(legacy, { force: true });
    log.warn({ file: legacy }, 'DEV MODE: imported the plain dev key file into the store (wrapped) and removed it');
  }
  if (manager.cache.current.policyCount === 0) {
    const version = await freshDevVersion(manager, options.dataDir);
    await upsertDocument(manager, generateDevBootstrap(version), options.masterKey);
    log.warn({ version }, 'DEV MODE: generated demo keys under a key version never used before');
  }
  log.warn(
    { policies: manager.cache.current.policies.map((p) => `${p.policyCode} (${p.algorithm})`) },
    'DEV MODE: serving demo policies with generated keys (stored wrapped in the data directory); never use dev mode in production',
  );
}
