// Master key loading: from SVC_MASTER_KEY or SVC_MASTER_KEY_FILE, a clear start-up error without one
// outside dev mode, and dev mode's generated key file (mode 0600) reused across restarts.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type LogFn, silentLogger } from '../src/store/logger.js';
import { DEV_MASTER_KEY_FILE, loadMasterKey, MasterKeyError } from '../src/store/master-key.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'svc-master-key-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('master key', () => {
  it('reads a base64 key from SVC_MASTER_KEY', async () => {
    const key = randomBytes(32);
    const loaded = await loadMasterKey({ value: key.toString('base64'), devMode: false, dataDir: dir }, silentLogger);
    expect(loaded.origin).toBe('SVC_MASTER_KEY');
    expect(loaded.key.equals(key)).toBe(true);
  });

  it('reads a key file holding base64 or exactly 32 raw bytes', async () => {
    const key = randomBytes(32);
    await writeFile(join(dir, 'b64'), `${key.toString('base64')}\n`);
    await writeFile(join(dir, 'raw'), key);
    for (const file of ['b64', 'raw']) {
      const loaded = await loadMasterKey({ file: join(dir, file), devMode: false, dataDir: dir }, silentLogger);
      expect(loaded.key.equals(key)).toBe(true);
    }
  });

  it('fails start-up clearly, naming the variables, without a key outside dev mode', async () => {
    await expect(loadMasterKey({ devMode: false, dataDir: dir }, silentLogger)).rejects.toThrow(
      'no master key: set SVC_MASTER_KEY or SVC_MASTER_KEY_FILE (only dev mode may generate one)',
    );
  });

  it('refuses a key of the wrong length, both settings at once, and an unreadable file', async () => {
    const short = randomBytes(16).toString('base64');
    await expect(loadMasterKey({ value: short, devMode: false, dataDir: dir }, silentLogger)).rejects.toThrow(
      'SVC_MASTER_KEY must hold a base64-encoded 32-byte key',
    );
    const both = { value: randomBytes(32).toString('base64'), file: join(dir, 'x'), devMode: true, dataDir: dir };
    await expect(loadMasterKey(both, silentLogger)).rejects.toThrow(MasterKeyError);
    await expect(loadMasterKey({ file: join(dir, 'missing'), devMode: false, dataDir: dir }, silentLogger)).rejects.toThrow(
      /SVC_MASTER_KEY_FILE: cannot read .*missing \(ENOENT\)/,
    );
  });

  it('generates a key in dev mode into a 0600 file, says so loudly without the key, and reuses it', async () => {
    const warnings: string[] = [];
    const warn: LogFn = (fields, message) => warnings.push(`${message} ${JSON.stringify(fields)}`);
    const log = { ...silentLogger, warn };
    const first = await loadMasterKey({ devMode: true, dataDir: dir }, log);
    expect(first.origin).toBe('dev-generated');
    const file = join(dir, DEV_MASTER_KEY_FILE);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await readFile(file, 'utf8')).trim()).toBe(first.key.toString('base64'));
    expect(warnings.join('\n')).toMatch(/DEV MODE: generated a new master key/);
    expect(warnings.join('\n')).not.toContain(first.key.toString('base64'));
    const second = await loadMasterKey({ devMode: true, dataDir: dir }, log);
    expect(second.origin).toBe('dev-file');
    expect(second.key.equals(first.key)).toBe(true);
  });
});
