// First step of the compose stack: creates the master key and the engine's one-time registration token
// in the secrets directory (argument, or SVC_SECRETS_DIR), each only if it is not there yet, mode 0600.
// Both come from node:crypto's CSPRNG. Nothing is printed but the file names.
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2] ?? process.env.SVC_SECRETS_DIR;
if (!dir) {
  console.error('usage: node scripts/keygen.mjs <secrets-dir>');
  process.exit(2);
}
mkdirSync(dir, { recursive: true, mode: 0o700 });
const secrets = {
  'master.key': randomBytes(32).toString('base64'),
  'registration.token': randomBytes(24).toString('base64url'),
};
for (const [name, value] of Object.entries(secrets)) {
  try {
    // 'wx' fails when the file exists: a restarted stack keeps its key (and so its stored data).
    writeFileSync(join(dir, name), `${value}\n`, { mode: 0o600, flag: 'wx' });
    console.log(`keygen: wrote ${name}`);
  } catch (error) {
    if (error.code !== 'EEXIST') throw error;
    console.log(`keygen: kept ${name}`);
  }
}
