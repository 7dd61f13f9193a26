// Policy and key record parsing: strict, and every refusal names the record (with its index) and the
// offending field, so an operator can find the bad entry in a bootstrap file or a hub sync payload.
import { describe, expect, it } from 'vitest';
import { parseBootstrap } from '../src/core/bootstrap.js';
import { EngineError } from '../src/core/errors.js';
import { parseKeyRecord, parsePolicyRecord } from '../src/core/records.js';
import { GCM_KEY_V1, SIV_KEY_V1 } from './support/fixtures.js';

const GOOD_POLICY = {
  policyCode: 'PII_EMAIL',
  policyName: 'pii-email',
  policyVersion: 3,
  algorithm: 'AES-256-SIV',
  keyAlias: 'pii',
  status: 'ACTIVE',
};
const GOOD_KEY = {
  alias: 'pii',
  version: 2,
  algorithm: 'AES-256-SIV',
  status: 'ACTIVE',
  material: Buffer.from(SIV_KEY_V1, 'hex').toString('base64'),
};

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(EngineError);
    expect((error as EngineError).code).toBe('INVALID_REQUEST');
    return (error as EngineError).message;
  }
  throw new Error('expected the record to be refused');
}

describe('parsePolicyRecord', () => {
  it('parses a complete record', () => {
    expect(parsePolicyRecord(GOOD_POLICY, 'p')).toEqual(GOOD_POLICY);
  });

  it('defaults the name to the code, the version to 1 and the status to ACTIVE, and upper-cases the status', () => {
    const { policyName: _n, policyVersion: _v, status: _s, ...minimal } = GOOD_POLICY;
    expect(parsePolicyRecord(minimal, 'p')).toEqual({
      ...minimal,
      policyName: 'PII_EMAIL',
      policyVersion: 1,
      status: 'ACTIVE',
    });
    expect(parsePolicyRecord({ ...GOOD_POLICY, status: 'decrypt_only' }, 'p').status).toBe('DECRYPT_ONLY');
  });

  it.each([
    ['policyCode', { policyCode: undefined }],
    ['policyCode', { policyCode: 'has:colon' }],
    ['policyCode', { policyCode: '' }],
    ['policyCode', { policyCode: 'x'.repeat(129) }],
    ['policyName', { policyName: 'line\nbreak' }],
    ['policyName', { policyName: 5 }],
    ['policyVersion', { policyVersion: 0 }],
    ['policyVersion', { policyVersion: 1.5 }],
    ['policyVersion', { policyVersion: '2' }],
    ['policyVersion', { policyVersion: 2 ** 32 }],
    ['algorithm', { algorithm: 'AES-128-GCM' }],
    ['algorithm', { algorithm: undefined }],
    ['keyAlias', { keyAlias: undefined }],
    ['keyAlias', { keyAlias: '' }],
    ['status', { status: 'RETIRED' }],
    ['status', { status: 1 }],
  ])('names %s when it is invalid (%o)', (field, change) => {
    const message = refusal(() => parsePolicyRecord({ ...GOOD_POLICY, ...change }, 'policies[4]'));
    expect(message.startsWith(`policies[4]: ${field} `)).toBe(true);
  });

  it('refuses a record that is not an object', () => {
    for (const raw of [null, [], 'PII', 1])
      expect(refusal(() => parsePolicyRecord(raw, 'policies[0]'))).toBe('policies[0]: must be an object');
  });
});

describe('parseKeyRecord', () => {
  it('parses a complete record and decodes the material', () => {
    expect(parseKeyRecord(GOOD_KEY, 'k')).toEqual({ ...GOOD_KEY, material: Buffer.from(SIV_KEY_V1, 'hex') });
  });

  it.each([
    ['alias', { alias: undefined }],
    ['alias', { alias: 'nul\u0000byte' }],
    ['version', { version: undefined }],
    ['version', { version: 0 }],
    ['version', { version: -3 }],
    ['algorithm', { algorithm: 'AES-256-CBC' }],
    ['status', { status: 'GONE' }],
    ['material', { material: undefined }],
    ['material', { material: 'not base64!' }],
    ['material', { material: 42 }],
  ])('names %s when it is invalid (%o)', (field, change) => {
    const message = refusal(() => parseKeyRecord({ ...GOOD_KEY, ...change }, 'keys[7]'));
    expect(message.startsWith(`keys[7]: ${field} `)).toBe(true);
  });

  it('refuses material whose length does not fit the algorithm, without echoing the material', () => {
    const gcmMaterial = Buffer.from(GCM_KEY_V1, 'hex').toString('base64');
    const message = refusal(() => parseKeyRecord({ ...GOOD_KEY, material: gcmMaterial }, 'keys[1]'));
    expect(message).toBe('keys[1]: AES-256-SIV key material must be 64 bytes');
    expect(message).not.toContain(gcmMaterial);
  });
});

describe('parseBootstrap', () => {
  it('names the index of the offending policy or key', () => {
    const doc = (policies: unknown[], keys: unknown[]) => ({ policies, keys });
    expect(refusal(() => parseBootstrap(doc([GOOD_POLICY, { ...GOOD_POLICY, keyAlias: '' }], [GOOD_KEY])))).toMatch(
      /^policies\[1\]: keyAlias /,
    );
    expect(
      refusal(() => parseBootstrap(doc([GOOD_POLICY], [GOOD_KEY, GOOD_KEY, { ...GOOD_KEY, version: 'x' }]))),
    ).toMatch(/^keys\[2\]: version /);
    expect(refusal(() => parseBootstrap({ policies: [] }))).toBe('bootstrap: policies and keys must be arrays');
  });

  it('reads a valid document into snapshot content', () => {
    const content = parseBootstrap({ runtimeVersion: 'r7', policies: [GOOD_POLICY], keys: [GOOD_KEY] });
    expect(content.runtimeVersion).toBe('r7');
    expect(content.policies).toHaveLength(1);
    expect(content.keys[0]?.material).toEqual(Buffer.from(SIV_KEY_V1, 'hex'));
  });
});
