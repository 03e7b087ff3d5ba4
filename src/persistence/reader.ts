/**
 * Reads and validates a snapshot (format: ./format.ts, docs/snapshot-format.md). One pass over the
 * bytes checks the structure entry by entry, then the footer's key count and CRC-32; any problem is a
 * SnapshotError naming the file, the byte offset and what is wrong. The reader never writes.
 */
import { readFileSync } from 'node:fs';
import { TYPE_NAMES } from '../keyspace/keyspace.js';
import {
  crc32, END_MARKER, ENTRY_NUMBERS_BYTES, ENTRY_PREFIX_BYTES, FLAG_BLOB, FOOTER_BYTES, FORMAT_VERSION, HEADER_BYTES, MAGIC,
} from './format.js';

export class SnapshotError extends Error {
  constructor(
    readonly file: string,
    readonly offset: number,
    readonly problem: string,
  ) {
    super(`snapshot ${file}: ${problem} at byte offset ${offset}`);
  }
}

/**
 * Receives each entry: its key is `bytes[keyStart, keyEnd)` (copy what you keep); `blob` is a fresh
 * copy the visitor may keep. Returning a string refuses the
 * entry: the read fails with that problem at the entry's offset (the loader refuses duplicate keys).
 */
export type EntryVisitor = (bytes: Buffer, keyStart: number, keyEnd: number, type: number, expireAtMs: number, a: number, b: number, c: number, blob: Float64Array | undefined) => string | void;

export interface SnapshotSummary {
  formatVersion: number;
  createdAtMs: number;
  keyCount: number;
  bytes: number;
  /** Entries per type number. */
  perType: Map<number, number>;
}

/** Reads `file` and validates it, calling `visit` for each entry. Throws SnapshotError. */
export function readSnapshotFile(file: string, visit: EntryVisitor = () => {}): SnapshotSummary {
  return parseSnapshot(readFileSync(file), file, visit);
}

export function parseSnapshot(buf: Buffer, file: string, visit: EntryVisitor): SnapshotSummary {
  const fail = (offset: number, problem: string): never => {
    throw new SnapshotError(file, offset, problem);
  };
  const size = buf.length;
  if (size < MAGIC.length || !buf.subarray(0, MAGIC.length).equals(MAGIC)) {
    fail(0, `not a cellgate snapshot (the file does not begin with the magic "CGSNAP\\r\\n"; ${size} bytes)`);
  }
  if (size < HEADER_BYTES) fail(size, `truncated: the file ends inside the ${HEADER_BYTES}-byte header`);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const version = view.getUint32(8, true);
  if (version !== FORMAT_VERSION) fail(8, `unsupported format version ${version} (this build reads version ${FORMAT_VERSION})`);
  const reserved = view.getUint32(12, true);
  if (reserved !== 0) fail(12, `corrupt header: reserved field is ${reserved}, expected 0`);
  const createdAtMs = view.getFloat64(16, true);

  const perType = new Map<number, number>();
  let count = 0;
  let p = HEADER_BYTES;
  for (;;) {
    if (p >= size) fail(p, `truncated: the file ends after ${count} entries, without the footer`);
    const type = buf[p];
    if (type === END_MARKER) break;
    const entryStart = p;
    if (TYPE_NAMES[type] === undefined) fail(p, `corrupt entry ${count}: unknown key type ${type}`);
    if (p + ENTRY_PREFIX_BYTES > size) fail(size, `truncated: the file ends inside entry ${count} (which starts at offset ${entryStart})`);
    const flags = buf[p + 1];
    if ((flags & ~FLAG_BLOB) !== 0) fail(p + 1, `corrupt entry ${count}: unknown flags 0x${flags.toString(16)}`);
    const keyLength = view.getUint32(p + 2, true);
    p += ENTRY_PREFIX_BYTES;
    if (p + keyLength + ENTRY_NUMBERS_BYTES > size) {
      fail(p, `truncated or corrupt: entry ${count} (key length ${keyLength}) runs past the end of the file (${size} bytes)`);
    }
    const keyStart = p;
    p += keyLength;
    const expireAtMs = view.getFloat64(p, true);
    const a = view.getFloat64(p + 8, true);
    const b = view.getFloat64(p + 16, true);
    const c = view.getFloat64(p + 24, true);
    if (!Number.isFinite(expireAtMs)) fail(p, `corrupt entry ${count}: expiry is not a finite number`);
    p += ENTRY_NUMBERS_BYTES;
    let blob: Float64Array | undefined;
    if ((flags & FLAG_BLOB) !== 0) {
      if (p + 4 > size) fail(size, `truncated: the file ends inside entry ${count} (which starts at offset ${entryStart})`);
      const blobLength = view.getUint32(p, true);
      p += 4;
      if (p + blobLength * 8 > size) fail(p, `truncated or corrupt: entry ${count} (blob of ${blobLength} numbers) runs past the end of the file (${size} bytes)`);
      blob = new Float64Array(blobLength);
      for (let i = 0; i < blobLength; i++, p += 8) blob[i] = view.getFloat64(p, true);
    }
    const refused = visit(buf, keyStart, keyStart + keyLength, type, expireAtMs, a, b, c, blob);
    if (refused !== undefined) fail(entryStart, `corrupt entry ${count}: ${refused}`);
    perType.set(type, (perType.get(type) ?? 0) + 1);
    count++;
  }
  if (p + FOOTER_BYTES > size) fail(p, `truncated: the file ends inside the ${FOOTER_BYTES}-byte footer`);
  if (p + FOOTER_BYTES < size) fail(p + FOOTER_BYTES, `corrupt: ${size - p - FOOTER_BYTES} unexpected bytes after the footer`);
  const storedCount = Number(view.getBigUint64(p + 1, true));
  const storedCrc = view.getUint32(p + 9, true);
  const actualCrc = crc32(buf.subarray(0, p + 9));
  if (storedCrc !== actualCrc) {
    fail(p + 9, `checksum mismatch: stored CRC-32 0x${hex(storedCrc)}, computed 0x${hex(actualCrc)} (the file is corrupt)`);
  }
  if (storedCount !== count) fail(p + 1, `corrupt footer: it counts ${storedCount} keys, the file holds ${count}`);
  return { formatVersion: version, createdAtMs, keyCount: count, bytes: size, perType };
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}
