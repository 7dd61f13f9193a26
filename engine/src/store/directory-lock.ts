// One process at a time on an embedded store directory. PGlite has no lock of its own, and two PGlite
// instances on one directory damage it. That can happen: after a SIGKILL of the engine its store
// process still closes PGlite while a restarted engine forks a new one. Like PostgreSQL's
// postmaster.pid, a lock file next to the directory holds the owner's process id; a live owner is
// waited for (an orphaned store process ends within a second or so), a dead one is taken over.
import { readFileSync, unlinkSync } from 'node:fs';
import { readFile, unlink, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/** How long a directory in use by another live process is waited for before giving up. */
export const LOCK_WAIT_MS = 10_000;

export function lockFileOf(dir: string): string {
  return `${dir}.lock`;
}

function alive(pid: number): boolean {
  // Our own id or our parent's (the engine, which never opens PGlite itself) in a lock we do not hold
  // are a previous run's: a restarted container numbers its processes the same way again.
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || pid === process.ppid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the lock of an embedded store directory and returns its release. Waits up to waitMs while
 * another live process holds it, then refuses with a message naming the lock file.
 */
export async function lockDirectory(dir: string, waitMs = LOCK_WAIT_MS): Promise<() => void> {
  const file = lockFileOf(dir);
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      await writeFile(file, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const read = () => readFile(file, 'utf8').catch(() => '');
    const content = await read();
    const owner = Number.parseInt(content, 10);
    if (!alive(owner)) {
      // Only the stale file read above (content written by one write), not one another process just took.
      if ((await read()) === content) await unlink(file).catch(() => undefined);
      continue;
    }
    if (Date.now() >= deadline) {
      throw new Error(
        `the embedded store directory ${dir} is in use by process ${owner} (lock file ${file}). ` +
          'Stop the other engine using this data directory; if none runs, remove the lock file.',
      );
    }
    await sleep(50);
  }
  let held = true;
  const release = () => {
    if (!held) return;
    held = false;
    process.off('exit', release);
    try {
      if (readFileSync(file, 'utf8').trim() === String(process.pid)) unlinkSync(file);
    } catch {
      // already gone
    }
  };
  process.on('exit', release);
  return release;
}
