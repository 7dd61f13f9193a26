// The sliced JSON decoder against JSON.parse: same value for every document, refused whenever JSON.parse
// refuses, whatever size the pieces are cut to (tiny pieces here, so small documents are cut everywhere).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseJsonSliced } from '../src/core/json-slices.js';
import { runInSlices, runNow } from '../src/core/time-slices.js';

const OPEN = { maxDepth: 1000, maxValues: Number.POSITIVE_INFINITY };

type Verdict = { value: unknown } | { refused: string };

function reference(text: string): Verdict {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return { refused: 'decode request: body is not valid JSON' };
  }
}

function sliced(text: string, pieceBytes: number, secure = false): Verdict {
  try {
    return { value: runNow(parseJsonSliced(Buffer.from(text), { ...OPEN, secure }, 'body', pieceBytes)) };
  } catch (error) {
    return { refused: (error as Error).message };
  }
}

/** JSON texts without "__proto__" keys (the scan refuses those by design), compact or indented. */
const documents = fc
  .tuple(fc.jsonValue({ maxDepth: 6 }), fc.constantFrom(undefined, 1, 2, '\t'))
  .map(([value, indent]) => JSON.stringify(value, null, indent))
  .filter((text) => !text.includes('"__proto__"'));

const STRUCTURAL = ['[', ']', '{', '}', ',', ':', '"', ' ', '1', 'x', '\\'];

/** A document with a few characters replaced, removed or inserted: mostly invalid JSON, sometimes valid. */
const damaged = fc
  .tuple(documents, fc.array(fc.tuple(fc.nat(), fc.constantFrom(...STRUCTURAL), fc.constantFrom('replace', 'remove', 'insert')), { minLength: 1, maxLength: 3 }))
  .map(([text, edits]) => {
    let out = text;
    for (const [at, char, how] of edits) {
      const i = out.length === 0 ? 0 : at % out.length;
      out = how === 'replace' ? out.slice(0, i) + char + out.slice(i + 1) : how === 'remove' ? out.slice(0, i) + out.slice(i + 1) : out.slice(0, i) + char + out.slice(i);
    }
    return out;
  })
  .filter((text) => !/_proto_/.test(text));

describe('the sliced JSON decoder', () => {
  it('gives the value JSON.parse gives, however small the pieces', () => {
    fc.assert(
      fc.property(documents, fc.integer({ min: 1, max: 64 }), (text, pieceBytes) => {
        expect(sliced(text, pieceBytes)).toEqual(reference(text));
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses what JSON.parse refuses and accepts what it accepts, on damaged documents', () => {
    fc.assert(
      fc.property(damaged, fc.integer({ min: 1, max: 32 }), (text, pieceBytes) => {
        expect(sliced(text, pieceBytes)).toEqual(reference(text));
      }),
      { numRuns: 5000 },
    );
  });

  it('refuses the separators JSON.parse never sees: cut commas, brackets and keys of large members', () => {
    const cases = [
      '[1,2,,3]',
      '[1,2,3,]',
      '[,1,2,3]',
      '[[1,2,3,4] [5,6,7,8]]',
      '[[1,2,3,4],[5,6,7,8]}',
      '{"a":[1,2,3,4],"b" [5,6,7,8]}',
      '{"a":[1,2,3,4],[5,6,7,8]}',
      '{"a":[1,2,3,4],"b":1:[5,6,7,8]}',
      '{"a":[1,2,3,4],"b":1[5,6,7,8]}',
      '{"a":[1,2,3,4],"b":-{"c":[5,6,7,8]}}',
      '{"a":[1,2,3,4],"b":true{"c":[5,6,7,8]}}',
      '[1,2,3,4] x',
      'x [1,2,3,4]',
      '[1,2,3,4]]',
      '[[1,2,3,4]',
    ];
    for (const text of cases) expect(sliced(text, 4), text).toEqual({ refused: 'decode request: body is not valid JSON' });
    expect(sliced(' \n[[1,2,3,4] , {"k" : [5,6,7,8] ,"k":{"x":[1,2,3,4,5]}}] \t', 4)).toEqual({
      value: [[1, 2, 3, 4], { k: { x: [1, 2, 3, 4, 5] } }],
    });
  });

  it('refuses a "constructor" holding a "prototype" in secure mode, also when the object is cut into pieces', () => {
    const texts = [
      '{"constructor":{"prototype":{"polluted":true}}}',
      '{"a":[1,2,3,4,5,6],"constructor":{"prototype":[1,2,3,4,5,6,7,8]}}',
      '[{"x":1},{"constructor":{"prototype":1,"pad":[1,2,3,4,5,6,7,8]}}]',
    ];
    for (const text of texts) {
      for (const pieceBytes of [4, 1024]) {
        expect(sliced(text, pieceBytes, true), text).toEqual({ refused: 'decode request: body is not valid JSON' });
        expect(sliced(text, pieceBytes, false), text).toEqual(reference(text));
      }
    }
    expect(sliced('\uFEFF[1,2,3,4,5,6,7,8]', 4, true)).toEqual({ value: [1, 2, 3, 4, 5, 6, 7, 8] });
  });

  it('keeps the scan limits and the "__proto__" refusal on documents parsed in pieces', () => {
    const limits = { maxDepth: 3, maxValues: 10 };
    const run = (text: string) => runNow(parseJsonSliced(Buffer.from(text), limits, 'body', 4));
    expect(() => run('[[[[1]]]]')).toThrow('decode request: JSON nested deeper than 3 levels');
    expect(() => run('[1,2,3,4,5,6,7,8,9,10,11]')).toThrow('decode request: JSON holds more than 10 values');
    expect(() => run('[{"a":1},{"__proto__":{}}]')).toThrow('decode request: "__proto__" keys are not accepted');
  });

  it('parses a large sync body in slices and gives the same value', async () => {
    const body = { policies: Array.from({ length: 20_000 }, (_, i) => ({ policyCode: `P_${i}`, policyVersion: i, tags: [i, `t${i}`] })), runtimeVersion: 'r1' };
    const text = JSON.stringify(body);
    expect(await runInSlices(parseJsonSliced(Buffer.from(text), OPEN, 'body'))).toEqual(body);
  });
});
