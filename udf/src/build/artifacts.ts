// Everything the udf build produces, as path → content: the SQL a DBA applies (committed under sql/)
// and the plv8 script the shim tests load (dist/plv8-bundle.js). One function, so the writer and the drift test agree.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type BridgeSources, extensionFiles, migrationFiles, RELEASED_EXTENSION_VERSIONS } from './install-script.js';
import { bundlePlv8 } from './plv8-bundle.js';

/** The udf workspace root (this file runs from src/build under vitest and from dist/build after tsc). */
export const UDF_ROOT = resolve(import.meta.dirname, '..', '..');

const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 12);

export function loadSources(root: string = UDF_ROOT): BridgeSources {
  const python = readFileSync(join(root, 'src', 'plpython', 'svc_bridge.py'), 'utf8');
  const javascript = bundlePlv8(readFileSync(join(root, 'src', 'plv8', 'bridge.ts'), 'utf8'));
  return { python, javascript, pythonHash: hash(python), javascriptHash: hash(javascript) };
}

/** Files under the repository's sql/ directory. */
/** The extension scripts as released, kept verbatim: what ALTER EXTENSION UPDATE starts from. */
export function loadExtensionHistory(root: string = UDF_ROOT): Record<string, string> {
  return Object.fromEntries(
    RELEASED_EXTENSION_VERSIONS.map((v) => [v, readFileSync(join(root, 'src', 'extension-history', `svc_bridge--${v}.sql`), 'utf8')]),
  );
}

export function sqlArtifacts(sources: BridgeSources = loadSources()): Record<string, string> {
  return { ...migrationFiles(sources), ...extensionFiles(sources, loadExtensionHistory()) };
}
