// The binary frame's rewrap operation (03 request, 83 result): its items have the decrypt layout, and
// a frame of one operation is refused at another operation's endpoint.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { errors } from '../src/core/errors.js';
import {
  decodeRequestFrame,
  decodeResponseFrame,
  encodeRequestFrame,
  encodeResponseFrame,
  Operation,
} from '../src/http/codecs/binary-frame.js';

describe('binary frame rewrap operation', () => {
  it('decodes what it encodes (rewrap requests)', () => {
    fc.assert(
      fc.property(fc.array(fc.stringMatching(/^[ -~]{0,40}$/), { maxLength: 20 }), (items) => {
        const frame = encodeRequestFrame('rewrap', items.map((data) => ({ data })));
        expect(frame.readUInt8(5)).toBe(0x03);
        const decoded = decodeRequestFrame(frame, 'rewrap', 100);
        expect(decoded.operation).toBe('rewrap');
        expect(decoded.items).toEqual(items);
      }),
    );
  });

  it('refuses a rewrap frame at the decrypt endpoint and a decrypt frame at the rewrap endpoint', () => {
    const rewrap = encodeRequestFrame('rewrap', [{ data: 'hub:P:AAAA' }]);
    const decrypt = encodeRequestFrame('decrypt', [{ data: 'hub:P:AAAA' }]);
    expect(() => decodeRequestFrame(rewrap, 'decrypt', 100)).toThrow(
      'decode request: binary frame operation does not match the decrypt endpoint',
    );
    expect(() => decodeRequestFrame(decrypt, 'rewrap', 100)).toThrow(
      'decode request: binary frame operation does not match the rewrap endpoint',
    );
    expect(() => decodeRequestFrame(rewrap, 'rewrap', 0)).toThrow('batch has 1 items; the limit is 0');
  });

  it('answers with operation 83 and the same per-item layout', () => {
    const out = encodeResponseFrame(
      'rewrap',
      [
        { ok: true, policyCode: 'P', data: 'hub:P:AQEAAAAC' },
        { ok: false, policyCode: 'P', error: errors.decryptionFailed() },
      ],
      { totalSuccess: 1, totalFailed: 1, totalProcessingTime: 3 },
    );
    const decoded = decodeResponseFrame(out);
    expect(decoded.operation).toBe(Operation.rewrapResult);
    expect(decoded.totals).toEqual({ totalSuccess: 1, totalFailed: 1, totalProcessingTime: 3 });
    expect(decoded.items.map((i) => [i.code, i.status, i.policyCode, i.data.toString('latin1')])).toEqual([
      [1000, 0, 'P', 'hub:P:AQEAAAAC'],
      [2000, 422, 'P', 'decryption failed'],
    ]);
  });
});
