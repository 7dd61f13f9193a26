// The core's state rules for a runtime change: what a full replace retires, what it writes, when a hub
// snapshot is held back, and the store digest's sensitivity to what it must detect.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { KeyRecord, PolicyRecord } from '../src/core/records.js';
import { holdBackReason, mergeRuntime, summarize } from '../src/core/runtime-merge.js';
import type { SnapshotContent } from '../src/core/runtime-snapshot.js';
import { runNow } from '../src/core/time-slices.js';

const key = (alias: string, version: number, status: KeyRecord['status'] = 'ACTIVE'): KeyRecord => ({
  alias,
  version,
  algorithm: 'AES-256-GCM',
  status,
  material: randomBytes(32),
});

const policy = (code: string, alias: string): PolicyRecord => ({
  policyCode: code,
  policyName: code.toLowerCase(),
  policyVersion: 1,
  algorithm: 'AES-256-GCM',
  keyAlias: alias,
  status: 'ACTIVE',
});

const content = (keys: KeyRecord[], policies: PolicyRecord[]): SnapshotContent => ({ keys, policies, runtimeVersion: 'r1' });

function snapshot(current: SnapshotContent, keys: KeyRecord[], policies: PolicyRecord[]) {
  const merged = runNow(
    mergeRuntime(
      current,
      { keys: { mode: 'replace', records: keys }, policies: { mode: 'replace', records: policies }, runtimeVersion: 'r2' },
      1000,
    ),
  );
  return { merged, reason: runNow(holdBackReason(current, merged)) };
}

describe('hub snapshots', () => {
  it('applies a hub taking over from a bootstrap file: its own keys replace the old ones, which are retired', () => {
    const current = content([key('boot', 1)], [policy('BOOT', 'boot')]);
    const { merged, reason } = snapshot(current, [key('hub', 1)], [policy('HUB', 'hub')]);
    expect(reason).toBeUndefined();
    expect(merged.content.keys.map((k) => `${k.alias}@${k.version}:${k.status}`)).toEqual(['boot@1:RETIRED', 'hub@1:ACTIVE']);
    expect(merged.changedKeys).toHaveLength(2);
  });

  it('holds back an empty snapshot, one leaving fewer than half of 4+ live keys, and one without policies', () => {
    const keys = [key('a', 1), key('a', 2), key('b', 1), key('b', 2)];
    const current = content(keys, [policy('A', 'a'), policy('B', 'b')]);
    expect(snapshot(current, [], []).reason).toBe('it would retire all 4 live key versions');
    expect(snapshot(current, [keys[0] as KeyRecord], current.policies as PolicyRecord[]).reason).toBe(
      'it would retire 3 of 4 live key versions, leaving 1',
    );
    expect(snapshot(current, keys.slice(0, 2), current.policies as PolicyRecord[]).reason).toBeUndefined();
    expect(snapshot(current, keys, []).reason).toBe('it would retire all 2 live policies');
  });

  it('writes nothing for records that did not change and keeps DISABLED versions DISABLED', () => {
    const disabled = key('a', 1, 'DISABLED');
    const current = content([disabled, key('a', 2)], [policy('A', 'a')]);
    const { merged } = snapshot(current, [current.keys[1] as KeyRecord], current.policies as PolicyRecord[]);
    expect(merged.changedKeys).toEqual([]);
    expect(merged.changedPolicies).toEqual([]);
    expect(merged.content.keys.find((k) => k.version === 1)?.status).toBe('DISABLED');
  });
});

describe('store digest', () => {
  const digest = (of: SnapshotContent) => runNow(summarize(of));

  it('does not depend on record order but on every name, version and state', () => {
    const keys = [key('a', 1), key('a', 2)];
    const policies = [policy('A', 'a')];
    const base = digest(content(keys, policies));
    expect(digest(content([...keys].reverse(), policies))).toEqual(base);
    expect(digest(content([keys[0] as KeyRecord], policies)).keyCount).toBe(1);
    expect(digest(content([keys[0] as KeyRecord, { ...(keys[1] as KeyRecord), status: 'RETIRED' }], policies)).digest).not.toBe(
      base.digest,
    );
  });

  it('is the digest earlier versions wrote, so a store they wrote is not taken for a damaged one', () => {
    const written = digest({
      runtimeVersion: 'r1',
      policies: [
        { ...policy('PII_GCM', 'a'), policyName: 'pii' },
        { ...policy('PII_OLD', 'a'), policyName: 'pii-old', policyVersion: 3, status: 'RETIRED' },
      ],
      keys: [key('a', 1, 'DECRYPT_ONLY'), key('a', 2)],
      destroyed: [{ alias: 'a', version: 0, algorithm: 'AES-256-GCM', destroyedAt: 5 }],
      minDecryptionVersions: new Map([['a', 1]]),
    });
    expect(written).toEqual({ digest: '80aaa7878a1e6b8ed325d6c86041be745bbd1b462a0d6014328e15517dc914b7', policyCount: 2, keyCount: 3 });
  });
});
