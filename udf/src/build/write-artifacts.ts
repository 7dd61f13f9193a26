// The udf build step. Always writes dist/plv8-bundle.js (the plv8 script, for the shim tests) and
// dist/sql/ (the generated SQL); with --write-sql it also refreshes the committed copies in ../sql/.
// Committed SQL is never rewritten by a plain build, so the drift test can catch a forgotten refresh.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { loadSources, sqlArtifacts, UDF_ROOT } from './artifacts.js';

function write(base: string, files: Record<string, string>): void {
  for (const [path, content] of Object.entries(files)) {
    const target = join(base, path);
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, content);
  }
}

const sources = loadSources();
const sql = sqlArtifacts(sources);
write(join(UDF_ROOT, 'dist'), { 'plv8-bundle.js': `${sources.javascript}\n` });
write(join(UDF_ROOT, 'dist', 'sql'), sql);
if (process.argv.includes('--write-sql')) {
  const target = resolve(UDF_ROOT, '..', 'sql');
  write(target, sql);
  console.log(`wrote ${Object.keys(sql).length} files under ${target}`);
}
