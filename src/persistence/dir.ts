/**
 * The snapshot directory at start: created if missing, proved writable, and locked for the life of
 * the process, so that every problem with it (read-only, permission denied, a file in the way,
 * another server using it) stops the start at once with its real cause instead of surfacing as a
 * failed save hours later. Throws DirError with a one-line reason. A full disk is the exception: it
 * is reported to the caller, which warns and serves (the snapshot still loads).
 */
import { closeSync, constants, fstatSync, fsyncSync, mkdirSync, openSync, readSync, rmSync, statSync, writeSync } from 'node:fs';
import { join, parse, resolve, sep } from 'node:path';
import { createExclusiveSync, EXCLUSIVE_CREATE_FLAGS, randomSuffix } from './exclusive-file.js';
import { LOCK_FILE_NAME } from './format.js';

export class DirError extends Error {}

/** Whether a process with this pid exists (EPERM: it does, under another user). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function code(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}

/**
 * Creates `dir` and its missing parents one level at a time, stopping at the first error. Not
 * `mkdirSync(dir, { recursive: true })`: Node's recursive mkdir retries the parent on some errors
 * and loops forever at 100% CPU where mkdir fails with ENOENT although the parent exists (any path
 * under /proc, e.g. `--dir /proc/x`).
 */
export function makeDirs(dir: string): void {
  const full = resolve(dir);
  let path = parse(full).root;
  for (const part of full.slice(path.length).split(sep).filter(Boolean)) {
    path = join(path, part);
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new DirError(`cannot create the snapshot directory '${dir}': ${code(e)} (at ${path})`);
      try {
        mkdirSync(path);
      } catch (e2) {
        throw new DirError(`cannot create the snapshot directory '${dir}': ${code(e2)} (mkdir ${path})`);
      }
      continue;
    }
    if (!isDir) throw new DirError(`cannot create the snapshot directory '${dir}': ENOTDIR (${path} is not a directory)`);
  }
}

/** Errors of a write that say the disk is full, not that the directory is refused: a start goes on. */
const FULL_DISK_CODES = new Set(['ENOSPC', 'EDQUOT']);

/**
 * Creates, writes and removes a probe file in `dir`, so that a directory that cannot be written
 * (EACCES, EROFS, a foreign owner) stops the start at once with its cause (DirError) rather than
 * surfacing as a failed save hours later. A full disk (ENOSPC, EDQUOT) is different: the snapshot
 * still loads and the limits can be served, and space may come back, so it is returned (the code)
 * for the caller to warn about and report as a failing save, as Redis starts and reports its failing
 * saves; null when the probe succeeded. The probe is created exclusively under a random name
 * (exclusive-file.ts), never through a symlink.
 */
export function checkWritable(dir: string): string | null {
  const probe = join(dir, `.cellgate-probe-${process.pid}-${randomSuffix()}`);
  let created = false;
  try {
    const fd = createExclusiveSync(probe, 0o600);
    created = true;
    try {
      writeSync(fd, 'x');
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    rmSync(probe);
    return null;
  } catch (e) {
    if (created) rmSync(probe, { force: true, maxRetries: 0 });
    if (FULL_DISK_CODES.has(code(e))) return code(e);
    throw new DirError(`the snapshot directory '${dir}' is not writable: ${code(e)}`);
  }
}

/** A lock file holds a pid: anything longer is not one of ours. */
const LOCK_FILE_MAX_BYTES = 64;

/**
 * A lock file's text, refusing a symlink (ELOOP) rather than reading its target, and anything but a
 * regular file (code NOT_REGULAR: a FIFO is opened without waiting for a writer and never read).
 * At most LOCK_FILE_MAX_BYTES are read.
 */
function readNoFollow(file: string): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw Object.assign(new Error(`${file} is a directory`), { code: 'EISDIR' });
    if (!st.isFile()) throw Object.assign(new Error(`${file} is not a regular file`), { code: 'NOT_REGULAR' });
    const buf = Buffer.alloc(LOCK_FILE_MAX_BYTES);
    return buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0));
  } finally {
    closeSync(fd);
  }
}

/**
 * The lock file `dir/.cellgate-lock`, created with O_EXCL and holding the owner's pid: a second
 * server on the same directory (whose saves would overwrite each other's snapshot) fails at start,
 * naming the first one's pid. A lock whose pid is not running (a `kill -9`, a power loss) is taken
 * over; so is one holding our own pid (a restarted container, where the server is pid 1 again).
 * `release()` removes it; main.ts calls it at exit.
 */
export class DirLock {
  readonly file: string;
  private held = false;
  /** Set (to the error code) when a full disk kept the lock file from being created or from holding the pid. */
  withoutPid: string | null = null;

  constructor(dir: string) {
    this.file = join(dir, LOCK_FILE_NAME);
  }

  /** Takes the lock; returns the pid of a stale lock taken over, or null. Throws DirError. */
  acquire(): number | null {
    let stalePid: number | null = null;
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const fd = openSync(this.file, EXCLUSIVE_CREATE_FLAGS, 0o644);
        this.held = true;
        try {
          writeSync(fd, `${process.pid}\n`);
        } catch (e) {
          // A full disk: the file exists but holds no pid, and a server that finds an empty lock
          // takes it over, as it does a stale one (when even the file cannot be created, there is
          // no lock at all). Serving goes on: main.ts warns.
          if (!FULL_DISK_CODES.has(code(e))) {
            this.held = false;
            rmSync(this.file, { force: true });
            throw e;
          }
          this.withoutPid = code(e);
        } finally {
          closeSync(fd);
        }
        return stalePid;
      } catch (e) {
        // A full disk that refuses even the lock file's inode: serve without a lock, as said above.
        if (!this.held && FULL_DISK_CODES.has(code(e))) {
          this.withoutPid = code(e);
          return stalePid;
        }
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new DirError(`cannot create the lock file ${this.file}: ${code(e)}`);
      }
      let text = '';
      try {
        text = readNoFollow(this.file).trim();
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue; // released meanwhile
        // ELOOP: a symlink planted at the lock's name is no lock; it is removed below, its target never
        // read. NOT_REGULAR (a FIFO, a device node): no lock either, removed the same way.
        const c = (e as NodeJS.ErrnoException).code;
        if (c !== 'ELOOP' && c !== 'NOT_REGULAR') throw new DirError(`cannot read the lock file ${this.file}: ${code(e)}`);
      }
      const pid = /^\d+$/.test(text) ? Number(text) : 0;
      if (pid > 0 && pid !== process.pid && processAlive(pid)) {
        throw new DirError(`the snapshot directory is in use by another cellgate (pid ${pid}, lock file ${this.file}); if no cellgate runs with that pid, remove the lock file`);
      }
      stalePid = pid;
      rmSync(this.file, { force: true });
    }
    throw new DirError(`cannot take the lock file ${this.file}: it keeps reappearing`);
  }

  /** Removes the lock file if this process holds it. Never throws. */
  release(): void {
    if (!this.held) return;
    this.held = false;
    try {
      const text = readNoFollow(this.file).trim();
      if (text === String(process.pid) || (text === '' && this.withoutPid !== null)) rmSync(this.file, { force: true });
    } catch {
      /* already gone */
    }
  }
}
