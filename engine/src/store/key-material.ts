// How key material in a sync record becomes raw bytes: `wrappedMaterial` (base64 of an RFC 5649 wrap
// under the engine's master key) always; `material` (raw base64) only when SVC_ALLOW_RAW_KEY_MATERIAL
// allows it, for development. Error texts name the record, never echo the material.
import { errors } from '../core/errors.js';
import { unwrapKey } from '../core/key-wrap.js';
import { type MaterialReader, readRawMaterial } from '../core/records.js';

const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;

export function wrappedMaterialReader(masterKey: Uint8Array, allowRaw: boolean): MaterialReader {
  return (raw, where) => {
    const wrapped = raw.wrappedMaterial;
    if (wrapped !== undefined) {
      if (raw.material !== undefined)
        throw errors.invalid(`${where}: send either wrappedMaterial or material, not both`);
      if (typeof wrapped !== 'string' || !BASE64.test(wrapped)) {
        throw errors.invalid(`${where}: wrappedMaterial must be base64`);
      }
      const material = unwrapKey(masterKey, Buffer.from(wrapped, 'base64'));
      if (!material) throw errors.invalid(`${where}: wrappedMaterial does not unwrap under the engine's master key`);
      return material;
    }
    if (raw.material !== undefined) {
      if (!allowRaw) {
        throw errors.invalid(
          `${where}: raw key material is refused; send wrappedMaterial (SVC_ALLOW_RAW_KEY_MATERIAL=true allows raw material in development)`,
        );
      }
      return readRawMaterial(raw, where);
    }
    throw errors.invalid(`${where}: wrappedMaterial is required`);
  };
}
