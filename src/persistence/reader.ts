/**
 * Reads and validates a snapshot (format: ./format.ts, docs/snapshot-format.md). One pass over the
 * bytes checks the structure entry by entry and every entry's numbers against what its algorithm can
 * store (format.ts entryProblem), then the footer's key count and CRC-32; any problem is a
 * SnapshotError naming the file, the byte offset and what is wrong. The reader never writes.
 *
 * The loader and `cellgate-server check` share one validation, SnapshotLoad: it fills a keyspace
 * (the server's, or a scratch one for `check`), so duplicate keys are found the same way by both and
 * a file `check` accepts is a file the server loads. It can run in slices (`step`), so a server
 * that listens while it loads answers INFO and PING between them.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Keyspace } from '../keyspace/keyspace.js';
import { isKeyType } from '../limiters/registry.js';
import {
  crc32, END_MARKER, entryProblem, ENTRY_NUMBERS_BYTES, ENTRY_PREFIX_BYTES, FLAG_BLOB, FOOTER_BYTES, FORMAT_VERSION, HEADER_BYTES, MAGIC, OLDEST_FORMAT_VERSION, typeKnownIn,
  MAX_CREATED_AT_MS,
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
 * Receives each entry, once its numbers passed validation: its key is `bytes[keyStart, keyEnd)`
 * (copy what you keep); `blob` is a fresh copy the visitor may keep. Returning a string refuses the
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

/**
 * A snapshot read entry by entry. `next(visit, n)` reads up to n entries; after the last one it
 * checks the footer and the CRC and returns the summary (until then, null).
 */
export class SnapshotParser {
  readonly size: number;
  private readonly view: DataView;
  private readonly version: number;
  private readonly createdAtMs: number;
  private readonly perType = new Map<number, number>();
  private count = 0;
  private p = HEADER_BYTES;
  private summary: SnapshotSummary | null = null;

  constructor(
    private readonly buf: Buffer,
    private readonly file: string,
  ) {
    const size = (this.size = buf.length);
    if (size < MAGIC.length || !buf.subarray(0, MAGIC.length).equals(MAGIC)) {
      this.fail(0, `not a cellgate snapshot (the file does not begin with the magic "CGSNAP\\r\\n"; ${size} bytes)`);
    }
    if (size < HEADER_BYTES) this.fail(size, `truncated: the file ends inside the ${HEADER_BYTES}-byte header`);
    const view = (this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength));
    const version = (this.version = view.getUint32(8, true));
    if (version < OLDEST_FORMAT_VERSION || version > FORMAT_VERSION) {
      this.fail(8, `unsupported format version ${version} (this build reads versions ${OLDEST_FORMAT_VERSION} to ${FORMAT_VERSION})`);
    }
    const reserved = view.getUint32(12, true);
    if (reserved !== 0) this.fail(12, `corrupt header: reserved field is ${reserved}, expected 0`);
    const createdAtMs = (this.createdAtMs = view.getFloat64(16, true));
    if (!(Number.isInteger(createdAtMs) && createdAtMs >= 0 && createdAtMs <= MAX_CREATED_AT_MS)) {
      this.fail(16, `corrupt header: creation time ${createdAtMs} is not an integer ms in [0, ${MAX_CREATED_AT_MS}]`);
    }
  }

  /** Bytes read so far (INFO loading_loaded_bytes). */
  get offset(): number {
    return this.p;
  }

  private fail(offset: number, problem: string): never {
    throw new SnapshotError(this.file, offset, problem);
  }

  next(visit: EntryVisitor, maxEntries: number): SnapshotSummary | null {
    if (this.summary !== null) return this.summary;
    const { buf, view, size } = this;
    let p = this.p;
    let count = this.count;
    try {
      for (let n = 0; n < maxEntries; n++) {
        if (p >= size) this.fail(p, `truncated: the file ends after ${count} entries, without the footer`);
        const type = buf[p];
        if (type === END_MARKER) return (this.summary = this.footer(p, count));
        const entryStart = p;
        if (!typeKnownIn(type, this.version)) this.fail(p, `corrupt entry ${count}: unknown key type ${type}${isKeyType(type) ? ` in a version ${this.version} file` : ''}`);
        if (p + ENTRY_PREFIX_BYTES > size) this.fail(size, `truncated: the file ends inside entry ${count} (which starts at offset ${entryStart})`);
        const flags = buf[p + 1];
        if ((flags & ~FLAG_BLOB) !== 0) this.fail(p + 1, `corrupt entry ${count}: unknown flags 0x${flags.toString(16)}`);
        const keyLength = view.getUint32(p + 2, true);
        p += ENTRY_PREFIX_BYTES;
        if (p + keyLength + ENTRY_NUMBERS_BYTES > size) {
          this.fail(p, `truncated or corrupt: entry ${count} (key length ${keyLength}) runs past the end of the file (${size} bytes)`);
        }
        const keyStart = p;
        p += keyLength;
        const numbersAt = p;
        const expireAtMs = view.getFloat64(p, true);
        const a = view.getFloat64(p + 8, true);
        const b = view.getFloat64(p + 16, true);
        const c = view.getFloat64(p + 24, true);
        if (!Number.isFinite(expireAtMs)) this.fail(p, `corrupt entry ${count}: expiry is not a finite number`);
        p += ENTRY_NUMBERS_BYTES;
        let blob: Float64Array | undefined;
        if ((flags & FLAG_BLOB) !== 0) {
          if (p + 4 > size) this.fail(size, `truncated: the file ends inside entry ${count} (which starts at offset ${entryStart})`);
          const blobLength = view.getUint32(p, true);
          p += 4;
          if (p + blobLength * 8 > size) this.fail(p, `truncated or corrupt: entry ${count} (blob of ${blobLength} numbers) runs past the end of the file (${size} bytes)`);
          blob = new Float64Array(blobLength);
          for (let i = 0; i < blobLength; i++, p += 8) blob[i] = view.getFloat64(p, true);
        }
        const wrong = entryProblem(type, expireAtMs, a, b, c, blob);
        if (wrong !== null) this.fail(numbersAt, `corrupt entry ${count}: ${wrong}`);
        const refused = visit(buf, keyStart, keyStart + keyLength, type, expireAtMs, a, b, c, blob);
        if (refused !== undefined) this.fail(entryStart, `corrupt entry ${count}: ${refused}`);
        this.perType.set(type, (this.perType.get(type) ?? 0) + 1);
        count++;
      }
      return null;
    } finally {
      this.p = p;
      this.count = count;
    }
  }

  private footer(p: number, count: number): SnapshotSummary {
    const { size, view } = this;
    if (p + FOOTER_BYTES > size) this.fail(p, `truncated: the file ends inside the ${FOOTER_BYTES}-byte footer`);
    if (p + FOOTER_BYTES < size) this.fail(p + FOOTER_BYTES, `corrupt: ${size - p - FOOTER_BYTES} unexpected bytes after the footer`);
    const storedCount = Number(view.getBigUint64(p + 1, true));
    const storedCrc = view.getUint32(p + 9, true);
    const actualCrc = crc32(this.buf.subarray(0, p + 9));
    if (storedCrc !== actualCrc) {
      this.fail(p + 9, `checksum mismatch: stored CRC-32 0x${hex(storedCrc)}, computed 0x${hex(actualCrc)} (the file is corrupt)`);
    }
    if (storedCount !== count) this.fail(p + 1, `corrupt footer: it counts ${storedCount} keys, the file holds ${count}`);
    return { formatVersion: this.version, createdAtMs: this.createdAtMs, keyCount: count, bytes: size, perType: this.perType };
  }
}

/** Reads `file` and validates it, calling `visit` for each entry. Throws SnapshotError. */
export function readSnapshotFile(file: string, visit: EntryVisitor = () => {}): SnapshotSummary {
  return parseSnapshot(readFileSync(file), file, visit);
}

export function parseSnapshot(buf: Buffer, file: string, visit: EntryVisitor): SnapshotSummary {
  const parser = new SnapshotParser(buf, file);
  for (;;) {
    const summary = parser.next(visit, Number.MAX_SAFE_INTEGER);
    if (summary !== null) return summary;
  }
}

export interface LoadCounts {
  summary: SnapshotSummary;
  loaded: number;
  expired: number;
}

/**
 * Loads a snapshot into an empty keyspace, validating it whole: structure, every entry's numbers,
 * no key twice (expired or not: whether a key has expired depends on when the file is read, and
 * `check` must accept exactly what a load at any time accepts), footer and checksum. Keys expired at
 * `nowMs` are counted and left out. On a SnapshotError the keyspace holds part of the file: the
 * caller clears it or stops.
 */
export class SnapshotLoad {
  readonly parser: SnapshotParser;
  loaded = 0;
  expired = 0;
  /** The expired keys seen so far (binary strings), to refuse a later duplicate of one. */
  private readonly expiredKeys = new Set<string>();
  private readonly visit: EntryVisitor;
  private result: LoadCounts | null = null;

  constructor(
    buf: Buffer,
    file: string,
    ks: Keyspace,
    nowMs: number,
    /** Busy-waits this many µs per key (the `key-load-delay` test setting, as Redis's). */
    keyDelayUs = 0,
  ) {
    this.parser = new SnapshotParser(buf, file);
    const expiredKeys = this.expiredKeys;
    this.visit = (bytes, keyStart, keyEnd, type, expireAtMs, a, b, c, blob) => {
      if (keyDelayUs > 0) {
        const until = performance.now() + keyDelayUs / 1000;
        while (performance.now() < until);
      }
      // Loaded keys expire at or after nowMs, so a lookup at nowMs finds every one loaded so far.
      if (ks.lookupKey(bytes, keyStart, keyEnd, nowMs) !== -1) return 'duplicate key';
      if (expiredKeys.size > 0 && expiredKeys.has(bytes.toString('latin1', keyStart, keyEnd))) return 'duplicate key';
      if (nowMs > expireAtMs) {
        expiredKeys.add(bytes.toString('latin1', keyStart, keyEnd));
        this.expired++;
        return;
      }
      const slot = ks.createKey(bytes, keyStart, keyEnd, type);
      ks.setState(slot, a, b, c);
      ks.setExpireAtMs(slot, expireAtMs);
      if (blob !== undefined) ks.setBlob(slot, blob);
      this.loaded++;
    };
  }

  /** Loads up to `maxEntries` more entries; returns the counts once the whole file is loaded and valid. Throws SnapshotError. */
  step(maxEntries: number): LoadCounts | null {
    if (this.result !== null) return this.result;
    const summary = this.parser.next(this.visit, maxEntries);
    if (summary === null) return null;
    this.expiredKeys.clear();
    return (this.result = { summary, loaded: this.loaded, expired: this.expired });
  }

  /** Loads the rest in one go. */
  run(): LoadCounts {
    for (;;) {
      const done = this.step(Number.MAX_SAFE_INTEGER);
      if (done !== null) return done;
    }
  }
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}
