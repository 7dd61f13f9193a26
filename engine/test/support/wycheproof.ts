// Reads Project Wycheproof vector files from the shared vectors folder beside the repository
// (`../shared/vectors/wycheproof/` from the repo root; SVC_WYCHEPROOF_DIR overrides). The files are
// never copied into the project. A missing folder or file is an error, so the suites fail loudly
// instead of passing with nothing checked.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

export type WycheproofResult = 'valid' | 'invalid' | 'acceptable';

export interface WycheproofGroup<T> {
  readonly type: string;
  readonly keySize: number;
  readonly ivSize?: number;
  readonly tagSize?: number;
  readonly tests: readonly T[];
}

interface BaseCase {
  readonly tcId: number;
  readonly comment: string;
  readonly flags?: readonly string[];
  readonly result: WycheproofResult;
}

/** AeadTest (aes_gcm_test.json): hex fields. */
export interface AeadCase extends BaseCase {
  readonly key: string;
  readonly iv: string;
  readonly aad: string;
  readonly msg: string;
  readonly ct: string;
  readonly tag: string;
}

/** DaeadTest (aes_siv_cmac_test.json): `ct` is SIV ‖ ciphertext. */
export interface DaeadCase extends BaseCase {
  readonly key: string;
  readonly aad: string;
  readonly msg: string;
  readonly ct: string;
}

/** KeywrapTest (aes_kwp_test.json). */
export interface KeywrapCase extends BaseCase {
  readonly key: string;
  readonly msg: string;
  readonly ct: string;
}

export interface WycheproofFile<T> {
  readonly algorithm: string;
  readonly numberOfTests: number;
  readonly testGroups: readonly WycheproofGroup<T>[];
}

export function wycheproofDir(): string {
  return process.env.SVC_WYCHEPROOF_DIR ?? join(REPO_ROOT, '..', 'shared', 'vectors', 'wycheproof');
}

export function loadWycheproof<T>(file: string): WycheproofFile<T> {
  const dir = wycheproofDir();
  const path = join(dir, file);
  if (!existsSync(path)) {
    throw new Error(
      `Wycheproof vectors not found: ${path} is missing. Provide the vectors in ../shared/vectors/wycheproof/ ` +
        'beside the repository, or point SVC_WYCHEPROOF_DIR at a folder holding the Wycheproof testvectors_v1 files.',
    );
  }
  const parsed = JSON.parse(readFileSync(path, 'utf8')) as WycheproofFile<T>;
  if (!Array.isArray(parsed.testGroups)) throw new Error(`${path} has no testGroups; is it a Wycheproof file?`);
  return parsed;
}

export function hex(value: string): Buffer {
  return Buffer.from(value, 'hex');
}
