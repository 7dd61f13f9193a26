// The engine's master key: the key-encryption key that wraps every key at rest (RFC 5649) and under
// which the hub delivers key material. It comes from SVC_MASTER_KEY (base64) or SVC_MASTER_KEY_FILE;
// dev mode alone may generate one in the data directory. Nothing here ever logs the key itself.
import { createHmac, randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KEK_LENGTH } from '../core/key-wrap.js';
import type { Logger } from './logger.js';

export interface MasterKeySettings {
  /** Base64 of 32 bytes (SVC_MASTER_KEY). */
  readonly value?: string;
  /** A file holding base64 of 32 bytes, or exactly 32 raw bytes (SVC_MASTER_KEY_FILE). */
  readonly file?: string;
  readonly devMode: boolean;
  readonly dataDir: string;
}

export interface MasterKey {
  readonly key: Buffer;
  /** Where it came from, for the start-up log: never the key itself. */
  readonly origin: 'SVC_MASTER_KEY' | 'SVC_MASTER_KEY_FILE' | 'dev-generated' | 'dev-file';
}

export class MasterKeyError extends Error {
  override readonly name = 'MasterKeyError';
}

export const DEV_MASTER_KEY_FILE = 'dev-master.key';

function decode(text: string, variable: string): Buffer {
  const trimmed = text.trim();
  const key = /^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed) ? Buffer.from(trimmed, 'base64') : Buffer.alloc(0);
  if (key.length !== KEK_LENGTH) {
    throw new MasterKeyError(`${variable} must hold a base64-encoded ${KEK_LENGTH}-byte key`);
  }
  return key;
}

async function readKeyFile(path: string, variable: string): Promise<Buffer> {
  let content: Buffer;
  try {
    content = await readFile(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new MasterKeyError(`${variable}: cannot read ${path} (${code})`);
  }
  return content.length === KEK_LENGTH ? content : decode(content.toString('latin1'), variable);
}

export async function loadMasterKey(settings: MasterKeySettings, log: Logger): Promise<MasterKey> {
  if (settings.value !== undefined && settings.file !== undefined) {
    throw new MasterKeyError('set only one of SVC_MASTER_KEY and SVC_MASTER_KEY_FILE');
  }
  if (settings.value !== undefined) return { key: decode(settings.value, 'SVC_MASTER_KEY'), origin: 'SVC_MASTER_KEY' };
  if (settings.file !== undefined) {
    return { key: await readKeyFile(settings.file, 'SVC_MASTER_KEY_FILE'), origin: 'SVC_MASTER_KEY_FILE' };
  }
  if (!settings.devMode) {
    throw new MasterKeyError(
      'no master key: set SVC_MASTER_KEY or SVC_MASTER_KEY_FILE (only dev mode may generate one)',
    );
  }
  const path = join(settings.dataDir, DEV_MASTER_KEY_FILE);
  const existing = await stat(path).catch(() => undefined);
  if (existing) {
    log.warn({ path }, 'DEV MODE: using the generated master key file; never use dev mode in production');
    return { key: await readKeyFile(path, path), origin: 'dev-file' };
  }
  await mkdir(settings.dataDir, { recursive: true });
  const key = randomBytes(KEK_LENGTH);
  // 'wx' refuses to overwrite a key another process created meanwhile; the mode keeps it private.
  await writeFile(path, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  await chmod(path, 0o600);
  log.warn(
    { path },
    'DEV MODE: generated a new master key in the data directory (mode 0600); it protects every stored key, so production must provide SVC_MASTER_KEY or SVC_MASTER_KEY_FILE',
  );
  return { key, origin: 'dev-generated' };
}

/** A fingerprint stored beside the keys so a store opened with another master key is refused at start. */
export function masterKeyCheck(key: Uint8Array): string {
  return createHmac('sha256', key).update('svc-engine master key check v1').digest('hex');
}
