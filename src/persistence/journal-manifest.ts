/**
 * The journal's manifest (Redis 7's multi-part AOF manifest): which base and incremental files make
 * the journal, in order (docs/journal-format.md).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { join } from 'node:path';
import { JournalError } from './journal-format.js';
import { fsyncDirSync } from './writer.js';

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY } = fs.constants;
/** A new file of the journal: created here and now, never an existing file or a symlink's target. */
export const CREATE_EXCLUSIVE = O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW;

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

/** Parses a manifest; `type h` (history, Redis's files waiting for deletion) lines are skipped. Throws JournalError. */
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
    const seq = Number(fields.get('seq'));
    const type = fields.get('type');
    if (parts.length % 2 !== 0 || name === undefined || !Number.isSafeInteger(seq) || seq < 1 || type === undefined) {
      throw new JournalError(file, at, `invalid manifest line '${line.slice(0, 128)}' (expected 'file <name> seq <n> type <b|h|i>')`);
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
  return m;
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
