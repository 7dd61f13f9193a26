// The README's first commands, as a new user pastes them: the dev-mode engine (what `npm start -- --dev`
// runs), and the curl examples run by a shell exactly as written, with only the address replaced.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type RunningEngine, startEngine } from '../src/engine-process.js';
import { REPO_ROOT } from '../src/postgres-harness.js';

const run = promisify(execFile);
let engine: RunningEngine;

/** The README's `sh` blocks whose text contains `marker`, pointed at the test engine. */
function readmeBlock(marker: string): string {
  const blocks = [...readFileSync(join(REPO_ROOT, 'README.md'), 'utf8').matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const block = blocks.find((b) => b.includes(marker));
  if (!block) throw new Error(`the README has no sh block with ${marker}`);
  return block.replaceAll('localhost:8080', new URL(engine.url).host);
}

/** Runs a block in sh and returns what it printed, and the comment lines the README says it prints. */
async function paste(block: string): Promise<{ printed: string[]; promised: string[] }> {
  const { stdout } = await run('sh', ['-e', '-c', block], { timeout: 30_000 });
  const promised = block.split('\n').filter((l) => l.startsWith('# ')).map((l) => l.slice(2));
  return { printed: stdout.split('\n').filter((l) => l !== ''), promised };
}

beforeAll(async () => {
  engine = await startEngine();
});

afterAll(async () => {
  await engine?.dispose();
});

it('the encrypt example answers in the shape the README shows', async () => {
  const { printed, promised } = await paste(readmeBlock('-d \'{"data":"alice@example.com","policyCode":"DEMO_DETERMINISTIC"}\'\n#'));
  expect(printed).toHaveLength(1);
  // The README abbreviates the ciphertext with "…": everything before it is what the engine answers.
  const [before, after] = (promised[0] as string).split('…') as [string, string];
  expect(printed[0]?.startsWith(before)).toBe(true);
  expect(printed[0]?.endsWith(after)).toBe(true);
  expect(JSON.parse(printed[0] as string)).toMatchObject({ success: true, policyCode: 'DEMO_DETERMINISTIC' });
});

it('the round trip pastes as it is and prints exactly what the README says', async () => {
  const { printed, promised } = await paste(readmeBlock('CIPHERTEXT=$('));
  expect(promised).toEqual(['{"success":true,"data":"alice@example.com","policyCode":"DEMO_DETERMINISTIC"}']);
  expect(printed).toEqual(promised);
});
