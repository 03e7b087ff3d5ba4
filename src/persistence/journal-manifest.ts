/**
 * The journal's manifest (Redis 7's multi-part AOF manifest): which base and incremental files make
 * the journal, in order (docs/journal-format.md).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { join } from 'node:path';
import { readRegularFile, readRegularFileSync, type FileReadError, type RegularFileLimits } from '../files/regular-file.js';
import { JournalError } from './journal-format.js';
import { fsyncDirSync } from './writer.js';

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY } = fs.constants;
/** A new file of the journal: created here and now, never an existing file or a symlink's target. */
export const CREATE_EXCLUSIVE = O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW;

/**
 * The largest seq a manifest may hold: 2^53−1, the largest integer a number holds exactly. The
 * server never writes a larger one (nextSeq refuses the rewrite that would), so whatever it writes
 * its loader and `check` accept.
 */
export const MAX_MANIFEST_SEQ = Number.MAX_SAFE_INTEGER;
/** A manifest names a base and a few incremental files, a line each: anything near this size is not one. */
export const MAX_MANIFEST_BYTES = 1024 * 1024;
const MANIFEST_LIMITS: RegularFileLimits = { maxBytes: MAX_MANIFEST_BYTES, what: 'journal manifest' };

/** A seq as the manifest writes it: decimal digits, no sign, no leading zero, no exponent, no hex; at most MAX_MANIFEST_SEQ. Else null. */
export function parseSeq(text: string | undefined): number | null {
  if (text === undefined || !/^[1-9][0-9]{0,15}$/.test(text)) return null;
  const n = Number(text);
  return n <= MAX_MANIFEST_SEQ ? n : null;
}

/**
 * The seq after `seq` for a new file of the journal. Throws, with what to do, when it would pass
 * MAX_MANIFEST_SEQ: the server never writes a manifest its own loader refuses (the rewrite that
 * needs it fails and says so; the journal as it is still loads).
 */
export function nextSeq(seq: number): number {
  if (seq >= MAX_MANIFEST_SEQ) {
    throw new Error(`the journal's file numbers (seq) have reached ${MAX_MANIFEST_SEQ}, the largest a manifest holds: no new file can be numbered; stop the server, move the journal folder aside and start from the snapshot (or CONFIG SET appendonly no, then yes, with the folder moved)`);
  }
  return seq + 1;
}

export interface ManifestFile {
  name: string;
  seq: number;
}

export interface Manifest {
  base: ManifestFile | null;
  incrs: ManifestFile[];
}

/** Redis's manifest lines: `file <name> seq <n> type <b|h|i>`, the base first, then the incremental files. */
export function formatManifest(m: Manifest): string {
  let out = '';
  if (m.base !== null) out += `file ${m.base.name} seq ${m.base.seq} type b\n`;
  for (const f of m.incrs) out += `file ${f.name} seq ${f.seq} type i\n`;
  return out;
}

/**
 * Parses a manifest with the rules both the loader and `check` apply (so a manifest `check` accepts
 * is one the server starts from); `type h` (history, Redis's files waiting for deletion) lines are
 * skipped. Throws JournalError.
 */
export function parseManifest(text: string, file: string): Manifest {
  const m: Manifest = { base: null, incrs: [] };
  let offset = 0;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    const at = offset;
    offset += raw.length + 1;
    if (line === '' || line.startsWith('#')) continue;
    const parts = line.split(/\s+/);
    const fields = new Map<string, string>();
    for (let i = 0; i + 1 < parts.length; i += 2) fields.set(parts[i], parts[i + 1]);
    const name = fields.get('file');
    const seq = parseSeq(fields.get('seq'));
    const type = fields.get('type');
    if (parts.length % 2 !== 0 || name === undefined || type === undefined) {
      throw new JournalError(file, at, `invalid manifest line '${line.slice(0, 128)}' (expected 'file <name> seq <n> type <b|h|i>')`);
    }
    if (seq === null) {
      throw new JournalError(file, at, `invalid seq '${String(fields.get('seq')).slice(0, 32)}' in the manifest (expected a decimal integer from 1 to ${MAX_MANIFEST_SEQ})`);
    }
    if (name.includes('/') || name === '.' || name === '..') throw new JournalError(file, at, `manifest names a path, not a file: '${name.slice(0, 128)}'`);
    if (type === 'b') {
      if (m.base !== null) throw new JournalError(file, at, 'the manifest names two base files');
      m.base = { name, seq };
    } else if (type === 'i') {
      const last = m.incrs[m.incrs.length - 1];
      if (last !== undefined && seq <= last.seq) throw new JournalError(file, at, `incremental file seq ${seq} after seq ${last.seq}: out of order`);
      m.incrs.push({ name, seq });
    } else if (type !== 'h') {
      throw new JournalError(file, at, `unknown file type '${type.slice(0, 16)}' in the manifest`);
    }
  }
  if (m.base === null && m.incrs.length === 0) throw new JournalError(file, 0, 'the manifest names no file');
  return m;
}

/**
 * Reads and parses the manifest at `file`, off the event loop; null when there is none. Only a
 * regular file of at most MAX_MANIFEST_BYTES is read (a FIFO or /dev/zero named as the manifest is
 * refused, never waited on). Throws JournalError, or FileReadError when it cannot be read at all.
 */
export async function readManifest(file: string): Promise<Manifest | null> {
  let buf: Buffer;
  try {
    buf = await readRegularFile(file, MANIFEST_LIMITS);
  } catch (e) {
    if ((e as FileReadError).code === 'ENOENT') return null;
    throw e;
  }
  return parseManifest(buf.toString('latin1'), file);
}

/** The same, blocking: for `cellgate-server check` (no event loop to keep). Throws JournalError or FileReadError (ENOENT too). */
export function readManifestSync(file: string): Manifest {
  return parseManifest(readRegularFileSync(file, MANIFEST_LIMITS).toString('latin1'), file);
}

/** Writes a manifest atomically: temp file, fsync, rename over the old one, directory fsync. */
export function writeManifest(dirPath: string, manifestName: string, m: Manifest): void {
  // Created exclusively under a fresh name, never through a symlink (as every file cellgate makes for itself).
  const temp = join(dirPath, `temp-${manifestName}.${randomBytes(6).toString('hex')}`);
  const fd = fs.openSync(temp, CREATE_EXCLUSIVE, 0o644);
  try {
    fs.writeSync(fd, formatManifest(m));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temp, join(dirPath, manifestName));
  fsyncDirSync(dirPath);
}
