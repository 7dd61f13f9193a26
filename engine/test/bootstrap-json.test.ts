// Bootstrap files that are not valid JSON: the error says where and why, never quoting the file
// (it holds raw keys).
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { describeJsonError } from '../src/core/bootstrap.js';

const KEY = 'c2VjcmV0LWtleS1tYXRlcmlhbC1zZWNyZXQta2V5LW1hdGVyaWFsLXNlY3JldC1rZXktbWF0ZXJpYWwtc2Vj';

describe('bootstrap JSON errors', () => {
  it('points at a base64 key wrapped onto two lines (openssl rand -base64 64) and says how to fix it', () => {
    const text = `{\n  "keys": [\n    { "alias": "pii", "material": "${KEY.slice(0, 64)}\n${KEY.slice(64)}" }\n  ]\n}\n`;
    const described = describeJsonError(text);
    const column = text.indexOf('\n', text.indexOf(KEY.slice(0, 64))) - text.lastIndexOf('\n', text.indexOf(KEY.slice(0, 64)));
    expect(described).toBe(
      `line 3, column ${column}: bad control character in string literal (a line break inside a string: keep each base64 key on one line, e.g. openssl base64 -A)`,
    );
    expect(described).not.toContain(KEY.slice(0, 10));
  });

  it('gives line and column for a trailing comma, a missing colon, an unexpected token and a cut-off file', () => {
    expect(describeJsonError('{\n  "policies": [],\n}')).toBe('line 3, column 1: expected double-quoted property name');
    expect(describeJsonError('{"keys" []}')).toBe("line 1, column 9: expected ':' after property name");
    expect(describeJsonError(`{"keys": [${KEY}]}`)).toBe('line 1, column 11: unexpected character');
    expect(describeJsonError('{"keys": [')).toBe('line 1, column 11: unexpected end of the text');
    expect(describeJsonError('{"keys": []}')).toBeUndefined();
  });

  it('agrees with what openssl rand -base64 64 prints: two lines, so the docs use openssl base64 -A', () => {
    const wrapped = execFileSync('openssl', ['rand', '-base64', '64'], { encoding: 'utf8' }).trimEnd();
    expect(wrapped.split('\n')).toHaveLength(2);
    const single = execFileSync('sh', ['-c', 'openssl rand 64 | openssl base64 -A'], { encoding: 'utf8' });
    expect(single).toMatch(/^[A-Za-z0-9+/]{86}==$/);
  });
});
