/**
 * `cellgate-server check` of a journal: its folder, its manifest, or one incremental file. The set
 * is loaded into a scratch keyspace exactly as the server loads it at start (journal.ts load: the
 * manifest's rules, the base with the snapshot loader, every record with JournalParser and
 * JournalReplay), so a set `check` accepts is a set the server starts from. A torn tail of the last
 * incremental file is reported; it is accepted (exit 0) because a start with aof-load-truncated yes,
 * the default, cuts it; anywhere else it is an error (exit 1).
 */
import { closeSync, readdirSync, readSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { FileReadError, openRegularFileSync, readWholeRegularFileSync } from '../files/regular-file.js';
import { Keyspace } from '../keyspace/keyspace.js';
import { JOURNAL_MAGIC, JournalError } from './journal-format.js';
import { readManifestSync } from './journal-manifest.js';
import { JournalParser } from './journal-parse.js';
import { JournalReplay } from './journal-replay.js';
import { JOURNAL_FILE, SNAPSHOT_FILE } from './persisted-file.js';
import { SnapshotError, SnapshotLoad } from './reader.js';

/** What `path` is, for check: a manifest (a folder resolves to the manifest in it), an incremental file, or neither. */
function journalKind(path: string): { manifest: string } | { incr: string } | null {
  let st;
  try {
    st = statSync(path);
  } catch {
    return null;
  }
  if (st.isDirectory()) {
    const manifests = readdirSync(path).filter((n) => n.endsWith('.manifest') && !n.startsWith('temp-'));
    if (manifests.length === 0) return null;
    const preferred = manifests.includes('appendonly.aof.manifest') ? 'appendonly.aof.manifest' : manifests.sort()[0];
    return { manifest: join(path, preferred) };
  }
  if (path.endsWith('.manifest')) return { manifest: path };
  const head = Buffer.alloc(JOURNAL_MAGIC.length);
  // Only a regular file is looked into (a FIFO is never waited on): anything else is checked as a
  // snapshot, whose reader refuses it with its reason.
  let fd: number;
  try {
    ({ fd } = openRegularFileSync(path, JOURNAL_FILE));
  } catch {
    return null;
  }
  try {
    readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  return head.equals(JOURNAL_MAGIC) ? { incr: path } : null;
}

/** Validates a journal and prints what it holds. Returns the exit code, or null when `path` is no journal (check it as a snapshot). */
export function checkJournal(path: string): number | null {
  const kind = journalKind(path);
  if (kind === null) return null;
  const nowMs = Date.now();
  const ks = new Keyspace();
  const lines: string[] = [];
  try {
    let incrs: string[];
    if ('manifest' in kind) {
      const m = readManifestSync(kind.manifest);
      const folder = dirname(kind.manifest);
      lines.push(`${kind.manifest}: valid cellgate journal manifest`);
      if (m.base !== null) {
        const baseFile = join(folder, m.base.name);
        const { summary } = new SnapshotLoad(readWholeRegularFileSync(baseFile, SNAPSHOT_FILE), baseFile, ks, nowMs).run();
        lines.push(`base: ${m.base.name} (${summary.keyCount} keys, ${summary.bytes} bytes)`);
      } else {
        lines.push('base: none');
      }
      incrs = m.incrs.map((f) => join(folder, f.name));
    } else {
      lines.push(`${kind.incr}: cellgate journal incremental file`);
      incrs = [kind.incr];
    }
    const replay = new JournalReplay(ks, nowMs);
    let records = 0;
    for (let i = 0; i < incrs.length; i++) {
      const buf = readWholeRegularFileSync(incrs[i], JOURNAL_FILE);
      const scan = new JournalParser(buf, incrs[i]).next(replay.apply, Number.MAX_SAFE_INTEGER)!;
      records += scan.records;
      lines.push(`incr: ${basename(incrs[i])} (${scan.records} records, ${buf.length} bytes)`);
      if (scan.torn !== null) {
        if (i !== incrs.length - 1) throw new JournalError(incrs[i], scan.validBytes, `truncated: ${scan.torn}, and it is not the last incremental file`);
        lines.push(`torn_tail: ${scan.torn} at byte offset ${scan.validBytes} (${buf.length - scan.validBytes} bytes; a start with aof-load-truncated yes cuts them)`);
      }
    }
    lines.push(`records: ${records}`, `keys: ${ks.size}`);
    process.stdout.write(lines.join('\n') + '\n');
    return 0;
  } catch (e) {
    const refused = e instanceof FileReadError && (e.code === 'NOT_REGULAR' || e.code === 'TOO_BIG');
    const message = e instanceof JournalError || e instanceof SnapshotError || refused ? e.message : `cannot read journal ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
    process.stderr.write(`cellgate: ${message}\n`);
    return 1;
  }
}
