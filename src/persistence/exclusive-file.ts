/**
 * Files cellgate creates next to others' files (the start-up probe, a save's temp file, CONFIG
 * REWRITE's and ACL SAVE's temp files, the pidfile's): always a new inode, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW under a name with a random part, so nobody who can write in that folder
 * can make cellgate open, truncate or chmod another file through a symlink planted at a name they
 * guessed. O_EXCL alone already refuses any existing name, a symlink included (dangling or not);
 * O_NOFOLLOW says the same thing twice, and the random part makes the name unguessable, so a planted
 * file cannot even make the operation fail (docs/persistence.md).
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** open(2) flags of every file cellgate creates for itself. */
export const EXCLUSIVE_CREATE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** 16 hex digits from the system's CSPRNG: a temp name nobody can predict. */
export function randomSuffix(): string {
  return randomBytes(8).toString('hex');
}

/** Creates `path`, which must not exist (not even as a symlink); returns the descriptor, opened for writing. */
export function createExclusiveSync(path: string, mode: number): number {
  return openSync(path, EXCLUSIVE_CREATE_FLAGS, mode);
}

/**
 * Replaces `path` with `data`, as a crash leaves it whole or not at all: the bytes go to a temp file
 * `.<name>.<tag>-<pid>-<random>` in the same folder, created exclusively, fsynced, then renamed over
 * `path`. The rename replaces whatever is at `path` (a symlink planted there is replaced, its target
 * is never opened). The temp file is removed on failure; errors are thrown.
 */
export function replaceFileSync(path: string, data: Buffer, mode: number, tag: string): void {
  const tmp = join(dirname(path), `.${basename(path)}.${tag}-${process.pid}-${randomSuffix()}`);
  const fd = createExclusiveSync(tmp, mode);
  try {
    try {
      for (let off = 0; off < data.length; ) off += writeSync(fd, data, off, data.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}
