/**
 * The journal folder's files, apart from what they hold: the names of the journal's own files found
 * there (an earlier journal's, a crashed rewrite's), the highest seq they use, new incremental files
 * created, the last one opened for appending, and temp files of dead processes removed.
 */
import fs from 'node:fs';
import { join } from 'node:path';
import { TEMP_FILE_PATTERN } from './format.js';
import { processAlive } from './dir.js';
import { encodeJournalHeader, JOURNAL_HEADER_BYTES } from './journal-format.js';
import { CREATE_EXCLUSIVE, parseSeq } from './journal-manifest.js';
import { fsyncDirSync } from './writer.js';

const { O_NOFOLLOW, O_RDWR } = fs.constants;

/** The journal's own files in the folder (`<prefix>.<seq>.base.snap` and `<prefix>.<seq>.incr.aof`). */
export function existingJournalFiles(dirPath: string, prefix: string): string[] {
  const pattern = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.\\d+\\.(?:base\\.snap|incr\\.aof)$`);
  try {
    return fs.readdirSync(dirPath).filter((n) => pattern.test(n));
  } catch {
    return [];
  }
}

/**
 * Highest seq among `names` (so new names never reuse theirs). A name whose number is no seq a
 * manifest may hold (beyond 2^53−1) is left out: no name the server makes can equal it, and it is
 * removed with the other leftovers once a new base is installed.
 */
export function highestSeq(names: string[]): number {
  let seq = 0;
  for (const name of names) {
    const m = /\.(\d+)\.(?:base\.snap|incr\.aof)$/.exec(name);
    const n = m === null ? null : parseSeq(m[1]);
    if (n !== null) seq = Math.max(seq, n);
  }
  return seq;
}

/** Creates incremental file `name` in `dirPath` (header written and synced, folder synced). Returns its descriptor. */
export function createIncrFile(dirPath: string, name: string): number {
  const path = join(dirPath, name);
  // A leftover of a rewrite that died before naming it in the manifest: never part of a loaded set.
  fs.rmSync(path, { force: true });
  const fd = fs.openSync(path, CREATE_EXCLUSIVE, 0o644);
  try {
    const header = encodeJournalHeader();
    fs.writeSync(fd, header, 0, header.length, 0);
    fs.fdatasyncSync(fd);
    fsyncDirSync(dirPath);
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
  return fd;
}

/** Opens the last incremental file for appending at `validBytes` (a torn tail is cut off first). */
export function openLastIncrFile(path: string, validBytes: number): { fd: number; size: number } {
  const fd = fs.openSync(path, O_RDWR | O_NOFOLLOW);
  let size = validBytes;
  if (validBytes < JOURNAL_HEADER_BYTES) {
    // Cut inside its header (a crash right after creating it): it holds no record; start it again.
    const header = encodeJournalHeader();
    fs.writeSync(fd, header, 0, header.length, 0);
    size = JOURNAL_HEADER_BYTES;
  }
  if (fs.fstatSync(fd).size !== size) {
    fs.ftruncateSync(fd, size);
    fs.fdatasyncSync(fd);
  }
  return { fd, size };
}

/** Removes temp files of rewrites that died with their process (the snapshot's rule: writer.ts tempPath), and half-written manifests. */
export function removeStaleJournalTemps(dirPath: string, manifestName: string): string[] {
  const removed: string[] = [];
  let names: string[];
  try {
    names = fs.readdirSync(dirPath);
  } catch {
    return removed;
  }
  for (const name of names) {
    if (name.startsWith(`temp-${manifestName}.`)) {
      // A manifest being written when the process died (the rename never happened): the lock is ours.
      fs.rmSync(join(dirPath, name), { force: true });
      removed.push(join(dirPath, name));
      continue;
    }
    const m = TEMP_FILE_PATTERN.exec(name);
    if (m === null || Number(m[1]) === process.pid || processAlive(Number(m[1]))) continue;
    fs.rmSync(join(dirPath, name), { force: true });
    removed.push(join(dirPath, name));
  }
  return removed;
}

export function fileSize(path: string): number {
  try {
    return fs.statSync(path).size;
  } catch {
    return 0;
  }
}
