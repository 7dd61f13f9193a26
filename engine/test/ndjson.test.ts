// The NDJSON line transform on its own: lines split anywhere across chunks, CRLF, blank lines,
// oversized lines answered and skipped without accumulating.
import { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ndjsonTransform } from '../src/http/codecs/ndjson.js';

function run(chunks: (string | Buffer)[], maxLineBytes = 1024): Promise<string> {
  const handlers = { line: (t: string) => `<${t}>`, tooLong: () => '<too long>', notUtf8: () => '<not utf-8>' };
  return text(Readable.from(chunks.map((c) => Buffer.from(c))).pipe(ndjsonTransform(handlers, maxLineBytes)));
}

describe('ndjson transform', () => {
  it('answers one line per request line, in order, however the input is chunked', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.stringMatching(/^[a-z{}":0-9 ]{1,30}$/), { minLength: 1, maxLength: 30 }),
        fc.array(fc.nat(40), { maxLength: 10 }),
        async (lines, cuts) => {
          const whole = Buffer.from(`${lines.join('\n')}\n`);
          const points = [...new Set(cuts.map((c) => c % whole.length))].sort((a, b) => a - b);
          const chunks = [0, ...points]
            .map((start, i) => whole.subarray(start, points[i] ?? whole.length))
            .filter((c) => c.length > 0);
          const expected = lines
            .filter((l) => l.trim() !== '')
            .map((l) => `<${l}>\n`)
            .join('');
          expect(await run(chunks)).toBe(expected);
        },
      ),
    );
  });

  it('handles CRLF, blank lines, multi-byte characters split across chunks and a last line without newline', async () => {
    const euro = Buffer.from('€');
    expect(
      await run([
        'a\r\n\n',
        Buffer.concat([Buffer.from('b'), euro.subarray(0, 1)]),
        Buffer.concat([euro.subarray(1), Buffer.from('\nc')]),
      ]),
    ).toBe('<a>\n<b€>\n<c>\n');
  });

  it('answers a line that is not valid UTF-8 with an error line and goes on', async () => {
    expect(await run([Buffer.from([0x61, 0x0a, 0xc3, 0x28, 0x0a, 0x62, 0x0a])])).toBe('<a>\n<not utf-8>\n<b>\n');
  });

  it('answers an oversized line with one error line, drops the rest of it and goes on', async () => {
    const long = 'x'.repeat(50);
    expect(await run(['ok1\n', long.slice(0, 20), long.slice(20), long, '\nok2\n', `${long}\nok3`], 30)).toBe(
      '<ok1>\n<too long>\n<ok2>\n<too long>\n<ok3>\n',
    );
  });
});
