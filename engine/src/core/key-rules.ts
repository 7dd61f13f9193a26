// Which key versions may still decrypt. One rule, used by decrypt, rewrap and equality terms, so that
// a change to the key lifecycle (new states, a minimum decryption version) is made here only.
import type { PreparedKey, RuntimeSnapshot } from './runtime-snapshot.js';

/** True when the snapshot holds this key version and its state lets it decrypt. */
export function mayDecrypt(_snapshot: RuntimeSnapshot, key: PreparedKey | undefined): key is PreparedKey {
  return key !== undefined && key.status !== 'DISABLED';
}

/** Every version of an alias that may decrypt, newest first. */
export function decryptableVersions(snapshot: RuntimeSnapshot, alias: string): PreparedKey[] {
  const out: PreparedKey[] = [];
  for (const record of snapshot.keys) {
    if (record.alias !== alias) continue;
    const key = snapshot.key(alias, record.version);
    if (mayDecrypt(snapshot, key)) out.push(key);
  }
  return out.sort((a, b) => b.version - a.version);
}
