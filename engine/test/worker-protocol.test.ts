// What crosses to the crypto workers as columns (workers/protocol.ts): items that differ only in their
// data, and outcomes that all succeeded, come back exactly as they went, key order included; anything
// else is left to travel as it is.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { itemsOf, packSuccesses, shareItems, unpackSuccesses } from '../src/workers/protocol.js';

const primitive = fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean(), fc.constant(null), fc.constant(undefined));
const key = fc.constantFrom('policyCode', 'policyName', 'policyVersion', 'encryptedData', 'other');

describe('items that differ only in their data', () => {
  it('travel as columns and are rebuilt equal, in their key order', () => {
    fc.assert(
      fc.property(
        fc.dictionary(key, primitive, { maxKeys: 3 }),
        fc.array(fc.string({ unit: 'grapheme', maxLength: 12 }), { minLength: 1, maxLength: 30 }),
        fc.nat(3),
        (fields, data, at) => {
          const keys = Object.keys(fields);
          keys.splice(Math.min(at, keys.length), 0, 'data');
          const items = data.map((value) => Object.fromEntries(keys.map((k) => [k, k === 'data' ? value : fields[k]])));
          const shared = shareItems(items);
          expect(shared).toBeDefined();
          const rebuilt = itemsOf(shared as NonNullable<typeof shared>);
          expect(rebuilt).toEqual(items);
          expect(rebuilt.map((item) => Object.keys(item))).toEqual(items.map((item) => Object.keys(item)));
        },
      ),
    );
  });

  it('travel as they are when any item differs in more than its data', () => {
    const base = [
      { data: 'a', policyCode: 'P' },
      { data: 'b', policyCode: 'P' },
    ];
    expect(shareItems(base)).toBeDefined();
    expect(shareItems([...base, { data: 'c', policyCode: 'Q' }])).toBeUndefined();
    expect(shareItems([...base, { policyCode: 'P', data: 'c' }])).toBeUndefined(); // another key order
    expect(shareItems([...base, { data: 'c', policyCode: 'P', policyVersion: 1 }])).toBeUndefined();
    expect(shareItems([...base, { data: 'c' }])).toBeUndefined();
    expect(shareItems([...base, { data: 3, policyCode: 'P' }])).toBeUndefined();
    expect(shareItems([...base, null])).toBeUndefined();
    expect(shareItems([...base, 'c'])).toBeUndefined();
    expect(shareItems([{ data: 'a', policyCode: { nested: 'P' } }])).toBeUndefined();
    expect(shareItems([Object.assign(Object.create(null) as object, { data: 'a' })])).toBeUndefined();
  });
});

describe('outcomes', () => {
  it('travel as columns only when every one succeeded with text', () => {
    const ok = [
      { ok: true, policyCode: 'P', data: 'hub:P:x' },
      { ok: true, policyCode: 'Q', data: '' },
    ];
    const packed = packSuccesses(ok);
    expect(packed).toBeDefined();
    expect(unpackSuccesses(packed as NonNullable<typeof packed>)).toEqual(ok);
    expect(packSuccesses([...ok, { ok: false, policyCode: 'P', code: 'DECRYPTION_FAILED', message: 'decryption failed' }])).toBeUndefined();
    expect(packSuccesses([...ok, { ok: true, policyCode: 'P', plaintext: new Uint8Array([1]) }])).toBeUndefined();
  });
});
