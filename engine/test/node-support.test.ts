// The README promises Node.js 20.19+: every installed package must accept the oldest Node in that
// range, or `npm ci` warns EBADENGINE and the package may not work there.
import { readFileSync } from 'node:fs';
import semver from 'semver';
import { expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const lock = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean }>;
};
const promised = (JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { engines: { node: string } }).engines
  .node;

it('promises Node 20.19 or later in package.json', () => {
  expect(semver.minVersion(promised)?.version).toBe('20.19.0');
});

it('installs only packages that accept the oldest promised Node version', () => {
  const oldest = semver.minVersion(promised)!.version;
  const refusing = Object.entries(lock.packages)
    .filter(([path]) => path !== '')
    .flatMap(([path, entry]) => {
      const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      return range && !semver.satisfies(oldest, range) ? [`${path.replace(/^.*node_modules\//, '')} (node ${range})`] : [];
    });
  expect(refusing).toEqual([]);
});
