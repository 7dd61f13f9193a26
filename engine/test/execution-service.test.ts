// The execution service's behaviour as every transport sees it: the contract's validation rules and
// messages, policy resolution, key rotation and statuses, batches, limits, text vs bytes, usage counters.
import { describe, expect, it } from 'vitest';
import { parseEnvelope } from '../src/core/ciphertext-envelope.js';
import { EngineError, type ErrorCode } from '../src/core/errors.js';
import type { ItemOutcome } from '../src/core/execution-service.js';
import { GCM_KEY_V1, GCM_KEY_V2, key, policy, serviceWith, standardContent } from './support/fixtures.js';

function thrown(fn: () => unknown): EngineError {
  try {
    fn();
  } catch (error) {
    if (error instanceof EngineError) return error;
    throw error;
  }
  throw new Error('expected an EngineError, but the call succeeded');
}

function expectError(fn: () => unknown, code: ErrorCode, message: string, status?: number): void {
  const error = thrown(fn);
  expect({ code: error.code, message: error.message }).toEqual({ code, message });
  if (status !== undefined) expect(error.status).toBe(status);
}

function failure(outcome: ItemOutcome | undefined): { code: ErrorCode; message: string } {
  if (!outcome || outcome.ok) throw new Error(`expected a failed item, got ${JSON.stringify(outcome)}`);
  return { code: outcome.error.code, message: outcome.error.message };
}

describe('encrypt request validation', () => {
  const { service } = serviceWith();

  it('requires policyCode or policyName, with the contract message', () => {
    expectError(
      () => service.encryptOne({ data: 'x' }),
      'POLICY_REQUIRED',
      'encrypt request requires policyCode or policyName',
      400,
    );
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: null, policyName: null }),
      'POLICY_REQUIRED',
      'encrypt request requires policyCode or policyName',
    );
    expect(thrown(() => service.encryptOne({ data: 'x' })).body()).toEqual({
      success: false,
      error: 'encrypt request requires policyCode or policyName',
    });
  });

  it('refuses policyCode combined with policyName', () => {
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'PII_GCM', policyName: 'customer' }),
      'INVALID_REQUEST',
      'policyCode cannot be combined with policyName',
      400,
    );
  });

  it('accepts policyVersion only with policyName, and only as a positive integer', () => {
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'PII_GCM', policyVersion: 1 }),
      'INVALID_REQUEST',
      'policyVersion is used only together with policyName',
    );
    for (const policyVersion of [0, -1, 1.5, '1', 2 ** 32, Number.NaN, true]) {
      expectError(
        () => service.encryptOne({ data: 'x', policyName: 'customer', policyVersion }),
        'INVALID_REQUEST',
        'policyVersion must be a positive integer',
      );
    }
  });

  it('refuses empty or non-string policy references and non-string data', () => {
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: '' }),
      'INVALID_REQUEST',
      'policyCode must be a non-empty string',
    );
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 7 }),
      'INVALID_REQUEST',
      'policyCode must be a non-empty string',
    );
    expectError(
      () => service.encryptOne({ data: 'x', policyName: '' }),
      'INVALID_REQUEST',
      'policyName must be a non-empty string',
    );
    expectError(() => service.encryptOne({ policyCode: 'PII_GCM' }), 'INVALID_REQUEST', 'data must be a string');
    expectError(
      () => service.encryptOne({ data: 42, policyCode: 'PII_GCM' }),
      'INVALID_REQUEST',
      'data must be a string',
    );
    for (const body of [null, [], 'text', 3]) {
      expectError(() => service.encryptOne(body), 'INVALID_REQUEST', 'request must be a JSON object');
    }
  });

  it('answers policy not found with the reference it was given', () => {
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'NOPE' }),
      'POLICY_NOT_FOUND',
      'policy not found: NOPE',
      404,
    );
    expectError(
      () => service.encryptOne({ data: 'x', policyName: 'nobody' }),
      'POLICY_NOT_FOUND',
      'policy not found: nobody',
    );
    expectError(
      () => service.encryptOne({ data: 'x', policyName: 'customer', policyVersion: 9 }),
      'POLICY_NOT_FOUND',
      'policy not found: customer version 9',
    );
  });
});

describe('decrypt request validation', () => {
  const { service } = serviceWith();
  const ciphertext = service.encryptOne({ data: 'hello', policyCode: 'PII_GCM' }).data;

  it('accepts data only: any policy field or encryptedData is refused with the contract message', () => {
    for (const extra of [
      { policyCode: 'PII_GCM' },
      { policyName: 'customer' },
      { policyVersion: 1 },
      { encryptedData: ciphertext },
      { policyCode: null },
    ]) {
      expectError(
        () => service.decryptOne({ data: ciphertext, ...extra }),
        'DECRYPT_DATA_ONLY',
        'decrypt request accepts data only',
        400,
      );
    }
  });

  it('refuses a missing or non-string data and a non-object body', () => {
    expectError(() => service.decryptOne({}), 'INVALID_REQUEST', 'data must be a string');
    expectError(() => service.decryptOne({ data: 1 }), 'INVALID_REQUEST', 'data must be a string');
    expectError(() => service.decryptOne([ciphertext]), 'INVALID_REQUEST', 'request must be a JSON object');
  });

  it('reports malformed ciphertext and unknown policies with the decided statuses', () => {
    expectError(() => service.decryptOne({ data: 'hello' }), 'MALFORMED_CIPHERTEXT', 'malformed ciphertext', 400);
    const elsewhere = ciphertext.replace('hub:PII_GCM:', 'hub:GONE:');
    expectError(() => service.decryptOne({ data: elsewhere }), 'POLICY_NOT_FOUND', 'policy not found: GONE', 404);
  });
});

describe('policy resolution', () => {
  const { service } = serviceWith();

  it('uses the latest version of a named policy when no version is given', () => {
    const latest = service.encryptOne({ data: 'x', policyName: 'customer' });
    expect(latest.policyCode).toBe('CUSTOMER_V2');
    expect(latest.data.startsWith('hub:CUSTOMER_V2:')).toBe(true);
  });

  it('uses the given version of a named policy', () => {
    const first = service.encryptOne({ data: 'x', policyName: 'customer', policyVersion: 1 });
    expect(first.policyCode).toBe('CUSTOMER_V1');
    expect(service.decryptOne({ data: first.data })).toEqual({ ok: true, policyCode: 'CUSTOMER_V1', data: 'x' });
  });

  it('round-trips text under both algorithms and reports the policy code', () => {
    for (const policyCode of ['PII_GCM', 'PII_SIV']) {
      for (const data of ['', 'a', 'Grüße 🔐', 'x'.repeat(10_000)]) {
        const encrypted = service.encryptOne({ data, policyCode });
        expect(encrypted.policyCode).toBe(policyCode);
        expect(service.decryptOne({ data: encrypted.data })).toEqual({ ok: true, policyCode, data });
      }
    }
  });

  it('is randomized under GCM and deterministic under SIV', () => {
    const gcm = [1, 2].map(() => service.encryptOne({ data: 'same', policyCode: 'PII_GCM' }).data);
    const siv = [1, 2].map(() => service.encryptOne({ data: 'same', policyCode: 'PII_SIV' }).data);
    expect(gcm[0]).not.toBe(gcm[1]);
    expect(siv[0]).toBe(siv[1]);
  });

  // docs/api.md, "Ciphertext format": AES-SIV reveals equality and the length of each value. This pins
  // that documented leak; if padding ever hides the length, the docs must change with this test.
  it('reveals the plaintext length under SIV, as documented: 6 + 16 + n bytes before base64', () => {
    const lengths = [0, 1, 2, 15, 16, 17, 100, 1000].map((n) => {
      const { data } = service.encryptOne({ data: 'x'.repeat(n), policyCode: 'PII_SIV' });
      return Buffer.from(data.slice('hub:PII_SIV:'.length), 'base64url').length;
    });
    expect(lengths).toEqual([0, 1, 2, 15, 16, 17, 100, 1000].map((n) => 6 + 16 + n));
    // Values of equal length stay the same length however different, so only the length shows.
    const [a, b] = ['alice', 'bobby'].map((data) => service.encryptOne({ data, policyCode: 'PII_SIV' }).data);
    expect(a).not.toBe(b);
    expect(a?.length).toBe(b?.length);
  });
});

describe('key rotation and statuses', () => {
  it('encrypts with the newest active key version while older versions keep decrypting', () => {
    const { service, cache } = serviceWith();
    const before = service.encryptOne({ data: 'old', policyCode: 'PII_GCM' }).data;
    expect(parseEnvelope(before).keyVersion).toBe(1);
    cache.upsert({ keys: [key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2)] });
    const after = service.encryptOne({ data: 'new', policyCode: 'PII_GCM' }).data;
    expect(parseEnvelope(after).keyVersion).toBe(2);
    expect(service.decryptOne({ data: before }).data).toBe('old');
    expect(service.decryptOne({ data: after }).data).toBe('new');
  });

  it('decrypts under a DECRYPT_ONLY key version but never encrypts with it', () => {
    const { service, cache } = serviceWith();
    cache.upsert({ keys: [key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2)] });
    const underTwo = service.encryptOne({ data: 'two', policyCode: 'PII_GCM' }).data;
    cache.upsert({ keys: [key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2, 'DECRYPT_ONLY')] });
    expect(parseEnvelope(service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).data).keyVersion).toBe(1);
    expect(service.decryptOne({ data: underTwo }).data).toBe('two');

    cache.upsert({ keys: [key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1, 'DECRYPT_ONLY')] });
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }),
      'POLICY_NOT_USABLE',
      'policy PII_GCM has no active AES-256-GCM key under alias test-gcm',
      409,
    );
    expect(service.decryptOne({ data: underTwo }).data).toBe('two');
  });

  it('does not decrypt under a DISABLED key version', () => {
    const { service, cache } = serviceWith();
    const ciphertext = service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).data;
    cache.upsert({ keys: [key('test-gcm', 1, 'AES-256-GCM', GCM_KEY_V1, 'DISABLED')] });
    expectError(
      () => service.decryptOne({ data: ciphertext }),
      'KEY_NOT_FOUND',
      'key not found: test-gcm version 1',
      404,
    );
  });

  it('refuses both encrypt and decrypt under a DISABLED policy', () => {
    const { service, cache } = serviceWith();
    const ciphertext = service.encryptOne({ data: 'x', policyCode: 'PII_SIV' }).data;
    cache.upsert({ policies: [policy('PII_SIV', 'AES-256-SIV', 'test-siv', { status: 'DISABLED' })] });
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'PII_SIV' }),
      'POLICY_NOT_USABLE',
      'policy PII_SIV is disabled',
      409,
    );
    expectError(() => service.decryptOne({ data: ciphertext }), 'POLICY_NOT_USABLE', 'policy PII_SIV is disabled');
  });

  it('decrypts but does not encrypt under a DECRYPT_ONLY policy', () => {
    const { service, cache } = serviceWith();
    const ciphertext = service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).data;
    cache.upsert({ policies: [policy('PII_GCM', 'AES-256-GCM', 'test-gcm', { status: 'DECRYPT_ONLY' })] });
    expectError(
      () => service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }),
      'POLICY_NOT_USABLE',
      'policy PII_GCM is decrypt-only',
    );
    expect(service.decryptOne({ data: ciphertext }).data).toBe('x');
  });

  it('refuses a snapshot with a key of another algorithm under a policy alias, leaving the cache as it was', () => {
    const content = standardContent();
    const { service, cache } = serviceWith(content);
    content.keys.push(key('test-gcm', 5, 'AES-256-SIV', '11'.repeat(64)));
    expect(() => cache.replace({ ...content, runtimeVersion: 'bad' })).toThrow(
      'key test-gcm version 5 is AES-256-SIV but policy PII_GCM using it is AES-256-GCM',
    );
    expect(cache.current.runtimeVersion).toBe('test');
    expect(parseEnvelope(service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).data).keyVersion).toBe(1);
  });

  it('refuses a snapshot where two policy codes share a name and version', () => {
    const content = standardContent();
    content.policies.push(policy('CUSTOMER_COPY', 'AES-256-GCM', 'test-gcm', { policyName: 'customer', policyVersion: 2 }));
    expect(() => serviceWith(content)).toThrow('policies CUSTOMER_V2 and CUSTOMER_COPY are both customer version 2');
  });
});

describe('batches', () => {
  it('encrypts items in order and isolates each failure', () => {
    const { service } = serviceWith();
    const results = service.encryptMany([
      { data: 'one', policyCode: 'PII_GCM' },
      { data: 'two', policyCode: 'MISSING' },
      { data: 'three' },
      'not an object',
      { data: 'five', policyName: 'customer', policyVersion: 1 },
      { data: 'six', policyCode: 'PII_SIV' },
    ]);
    expect(results).toHaveLength(6);
    expect(results.map((r) => r.ok)).toEqual([true, false, false, false, true, true]);
    expect(failure(results[1])).toEqual({ code: 'POLICY_NOT_FOUND', message: 'policy not found: MISSING' });
    expect(results[1]?.policyCode).toBe('MISSING');
    expect(failure(results[2])).toEqual({
      code: 'POLICY_REQUIRED',
      message: 'encrypt request requires policyCode or policyName',
    });
    expect(failure(results[3])).toEqual({ code: 'INVALID_REQUEST', message: 'request must be a JSON object' });
    const plaintexts = ['one', 'five', 'six'];
    const successes = results.filter((r) => r.ok);
    expect(successes.map((r) => r.policyCode)).toEqual(['PII_GCM', 'CUSTOMER_V1', 'PII_SIV']);
    expect(successes.map((r) => service.decryptOne({ data: r.data }).data)).toEqual(plaintexts);
  });

  it('decrypts items in order and isolates each failure', () => {
    const { service } = serviceWith();
    const a = service.encryptOne({ data: 'a', policyCode: 'PII_GCM' }).data;
    const b = service.encryptOne({ data: 'b', policyCode: 'PII_SIV' }).data;
    const tampered = `${a.slice(0, -2)}${a.endsWith('AA') ? 'BA' : 'AA'}`;
    const results = service.decryptMany([
      { data: b },
      { data: 'garbage' },
      { data: a, policyCode: 'PII_GCM' },
      { data: tampered },
      { data: a },
    ]);
    expect(results.map((r) => (r.ok ? r.data : r.error.code))).toEqual([
      'b',
      'MALFORMED_CIPHERTEXT',
      'DECRYPT_DATA_ONLY',
      expect.stringMatching(/^(DECRYPTION_FAILED|MALFORMED_CIPHERTEXT)$/),
      'a',
    ]);
    expect(results[0]?.policyCode).toBe('PII_SIV');
    expect(results[4]?.policyCode).toBe('PII_GCM');
  });

  it('accepts an empty batch', () => {
    const { service } = serviceWith();
    expect(service.encryptMany([])).toEqual([]);
    expect(service.decryptMany([])).toEqual([]);
  });
});

describe('not configured', () => {
  it('answers 503 crypto service is not configured while the cache is empty', () => {
    const { service, cache } = serviceWith({ policies: [], keys: [] });
    const calls = [
      () => service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }),
      () => service.decryptOne({ data: 'hub:PII_GCM:AQEAAAAB_w' }),
      () => service.encryptMany([{ data: 'x', policyCode: 'PII_GCM' }]),
      () => service.decryptMany([{ data: 'hub:PII_GCM:AQEAAAAB_w' }]),
    ];
    for (const call of calls) {
      const error = thrown(call);
      expect(error.code).toBe('NOT_CONFIGURED');
      expect(error.status).toBe(503);
      expect(error.body()).toEqual({ error: 'crypto service is not configured' });
    }
    cache.replace({ ...standardContent(), runtimeVersion: 'later' });
    expect(service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).ok).toBe(true);
  });

  it('counts policies without keys as not configured, and an empty cache too', () => {
    const { service, cache } = serviceWith({ policies: standardContent().policies, keys: [] });
    expect(thrown(() => service.encryptOne({ data: 'x', policyCode: 'PII_GCM' })).code).toBe('NOT_CONFIGURED');
    cache.replace({ ...standardContent(), runtimeVersion: 'x' });
    cache.replace({ policies: [], keys: [], runtimeVersion: '' });
    expect(thrown(() => service.encryptOne({ data: 'x', policyCode: 'PII_GCM' })).code).toBe('NOT_CONFIGURED');
  });
});

describe('limits', () => {
  it('refuses a batch above maxBatchItems as a whole and accepts one at the limit', () => {
    const { service } = serviceWith(undefined, { maxBatchItems: 3, maxDataBytes: 1024 });
    const item = { data: 'x', policyCode: 'PII_GCM' };
    expect(service.encryptMany([item, item, item])).toHaveLength(3);
    expectError(
      () => service.encryptMany([item, item, item, item]),
      'PAYLOAD_TOO_LARGE',
      'batch has 4 items; the limit is 3',
      413,
    );
    expectError(() => service.decryptMany([{}, {}, {}, {}]), 'PAYLOAD_TOO_LARGE', 'batch has 4 items; the limit is 3');
  });

  it('measures plaintext in UTF-8 bytes against maxDataBytes', () => {
    const { service } = serviceWith(undefined, { maxBatchItems: 10, maxDataBytes: 8 });
    expect(service.encryptOne({ data: '12345678', policyCode: 'PII_GCM' }).ok).toBe(true);
    expectError(
      () => service.encryptOne({ data: '123456789', policyCode: 'PII_GCM' }),
      'PAYLOAD_TOO_LARGE',
      'data exceeds 8 bytes',
      413,
    );
    // Five characters, ten bytes.
    expectError(
      () => service.encryptOne({ data: 'ééééé', policyCode: 'PII_GCM' }),
      'PAYLOAD_TOO_LARGE',
      'data exceeds 8 bytes',
    );
  });

  it('decrypts every ciphertext it produced for data at the limit, under the longest policy code', () => {
    const longCode = 'L'.repeat(128);
    const content = standardContent();
    content.policies.push(policy(longCode, 'AES-256-GCM', 'test-gcm'));
    const { service } = serviceWith(content, { maxBatchItems: 10, maxDataBytes: 100 });
    for (const policyCode of ['PII_GCM', 'PII_SIV', longCode]) {
      const data = 'é'.repeat(50);
      const ciphertext = service.encryptOne({ data, policyCode }).data;
      expect(ciphertext.length).toBeGreaterThan(100);
      expect(service.decryptOne({ data: ciphertext })).toEqual({ ok: true, policyCode, data });
    }
  });

  it('refuses on decrypt a ciphertext longer than any envelope of data within the limit', () => {
    const { service: wide } = serviceWith();
    const ciphertext = wide.encryptOne({ data: 'x'.repeat(300), policyCode: 'PII_GCM' }).data;
    const { service } = serviceWith(undefined, { maxBatchItems: 10, maxDataBytes: 120 });
    expectError(() => service.decryptOne({ data: ciphertext }), 'PAYLOAD_TOO_LARGE', 'data exceeds 120 bytes');
    expect(failure(service.decryptMany([{ data: ciphertext }])[0]).code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('fails only the oversized item of a batch', () => {
    const { service } = serviceWith(undefined, { maxBatchItems: 10, maxDataBytes: 120 });
    const results = service.encryptMany([
      { data: 'x'.repeat(121), policyCode: 'PII_GCM' },
      { data: 'small', policyCode: 'PII_GCM' },
    ]);
    expect(failure(results[0]).code).toBe('PAYLOAD_TOO_LARGE');
    expect(results[1]?.ok).toBe(true);
  });
});

describe('text and bytes', () => {
  it('refuses non-UTF-8 plaintext through decryptText but returns it through decryptData', () => {
    const { service } = serviceWith();
    const snapshot = service.snapshot();
    const bytes = Uint8Array.from([0xff, 0xfe, 0x00, 0xc3]);
    for (const policyCode of ['PII_GCM', 'PII_SIV']) {
      const ciphertext = service.encryptData(snapshot, { policyCode }, bytes).data;
      expectError(
        () => service.decryptText(snapshot, ciphertext),
        'NOT_UTF8',
        'decrypted data is not valid UTF-8; use the binary frame transport',
        422,
      );
      expect(() => service.decryptOne({ data: ciphertext })).toThrow(EngineError);
      expect(failure(service.decryptMany([{ data: ciphertext }])[0]).code).toBe('NOT_UTF8');
      expect(service.decryptData(snapshot, ciphertext)).toEqual({ policyCode, plaintext: Buffer.from(bytes) });
    }
  });
});

describe('text that UTF-8 cannot carry', () => {
  it('refuses text with a lone surrogate instead of silently replacing it', () => {
    const { service } = serviceWith();
    for (const data of ['a\uD800b', '\uDFFF', 'end\uD83D']) {
      for (const policyCode of ['PII_GCM', 'PII_SIV']) {
        expectError(
          () => service.encryptOne({ data, policyCode }),
          'INVALID_REQUEST',
          'data must be valid Unicode text (it contains a lone surrogate)',
          400,
        );
      }
      expect(failure(service.encryptMany([{ data, policyCode: 'PII_SIV' }])[0]).code).toBe('INVALID_REQUEST');
    }
    // A proper pair is one code point and round-trips.
    const emoji = service.encryptOne({ data: '\uD83D\uDD10', policyCode: 'PII_SIV' }).data;
    expect(service.decryptOne({ data: emoji }).data).toBe('🔐');
  });
});

describe('usage counters', () => {
  it('count encryptions and successful decryptions per key version', () => {
    const { service, cache } = serviceWith();
    const usage = (alias: string, version: number) =>
      cache.counters.entries().find((e) => e.alias === alias && e.version === version);
    const ciphertext = service.encryptOne({ data: 'x', policyCode: 'PII_GCM' }).data;
    service.encryptMany([
      { data: 'y', policyCode: 'PII_GCM' },
      { data: 'z', policyCode: 'PII_SIV' },
    ]);
    service.decryptOne({ data: ciphertext });
    expect(() => service.decryptOne({ data: ciphertext.replace('hub:PII_GCM:', 'hub:PII_GCM_OTHER:') })).toThrow(
      EngineError,
    );
    expect(usage('test-gcm', 1)).toMatchObject({ encryptions: 2, decryptions: 1 });
    expect(usage('test-siv', 1)).toMatchObject({ encryptions: 1, decryptions: 0 });

    // Counters outlive snapshots: a sync does not reset them.
    cache.upsert({ keys: [key('test-gcm', 2, 'AES-256-GCM', GCM_KEY_V2)] });
    service.encryptOne({ data: 'x', policyCode: 'PII_GCM' });
    expect(usage('test-gcm', 1)).toMatchObject({ encryptions: 2, decryptions: 1 });
    expect(usage('test-gcm', 2)).toMatchObject({ encryptions: 1, decryptions: 0 });
  });
});
