// Which key versions may still decrypt, for rewrap and equality terms. The rule itself (key states, the
// minimum decryption version) is the snapshot's decryptKey, which decrypt uses directly.
import { EngineError } from './errors.js';
import type { PreparedKey, RuntimeSnapshot } from './runtime-snapshot.js';

/** True when the snapshot holds this key version and its state lets it decrypt. */
export function mayDecrypt(snapshot: RuntimeSnapshot, key: PreparedKey | undefined): key is PreparedKey {
  return key !== undefined && !(snapshot.decryptKey(key.alias, key.version) instanceof EngineError);
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
