/**
 * Reading a file that someone else controls (a configuration directory, a mounted Secret, an ACL
 * file, a certificate): only a regular file of at most a stated size is read, so a FIFO, a device
 * such as /dev/zero, a directory or a symlink loop is refused with a clear reason instead of
 * blocking the process or growing its memory without end.
 *
 * The checks are made on the opened descriptor, not on the path (no window between the check and
 * the read), the open is non-blocking (opening a FIFO for reading never waits for a writer), and
 * the read stops one byte past the bound (a file that grows while it is read is refused too).
 * `readRegularFile` runs in libuv's thread pool: the event loop never waits for the disk.
 * `readRegularFileSync` is for the start, before any port is open.
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { open } from 'node:fs/promises';

/** Why a file was not read; `code` is the errno name (ENOENT, ELOOP...) or one of the names below. */
export class FileReadError extends Error {
  constructor(
    readonly path: string,
    /** An errno name, or NOT_REGULAR (a FIFO, device, socket or directory) or TOO_BIG. */
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'FileReadError';
  }
}

export interface RegularFileLimits {
  /** The largest size accepted, in bytes. */
  maxBytes: number;
  /** What the file is, for the message ("rls-config file", "tls-cert-file"...). */
  what: string;
}

// O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer (the
// descriptor is then refused as not regular). O_NOCTTY: a terminal never becomes ours.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;

function kindOf(st: Stats): string {
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  if (st.isDirectory()) return 'a directory';
  return 'not a regular file';
}

function openError(path: string, what: string, e: unknown): FileReadError {
  if (e instanceof FileReadError) return e;
  const code = (e as NodeJS.ErrnoException).code ?? 'EIO';
  const why = code === 'ELOOP' ? 'too many levels of symbolic links' : code;
  return new FileReadError(path, code, `cannot read ${what} '${path}': ${why}`);
}

function checkStats(path: string, limits: RegularFileLimits, st: Stats): void {
  if (!st.isFile()) {
    throw new FileReadError(path, 'NOT_REGULAR', `cannot read ${limits.what} '${path}': it is ${kindOf(st)}, only regular files are read`);
  }
  if (st.size > limits.maxBytes) throw tooBig(path, limits);
}

function tooBig(path: string, limits: RegularFileLimits): FileReadError {
  return new FileReadError(path, 'TOO_BIG', `cannot read ${limits.what} '${path}': it is larger than ${limits.maxBytes} bytes`);
}

const CHUNK_BYTES = 64 * 1024;

/**
 * The bytes read so far, in chunks: memory follows what the file really holds (its size may change
 * after fstat), and one byte past the bound is an error (a file that grew while read is refused).
 */
class Chunks {
  private readonly parts: Buffer[] = [];
  private total = 0;
  constructor(
    private readonly path: string,
    private readonly limits: RegularFileLimits,
  ) {}

  next(): Buffer {
    return Buffer.allocUnsafe(Math.min(CHUNK_BYTES, this.limits.maxBytes + 1 - this.total));
  }

  add(buf: Buffer, n: number): void {
    this.total += n;
    if (this.total > this.limits.maxBytes) throw tooBig(this.path, this.limits);
    this.parts.push(n === buf.length ? buf : buf.subarray(0, n));
  }

  done(): Buffer {
    return Buffer.concat(this.parts, this.total);
  }
}

/** The whole file, read off the event loop; rejects with a FileReadError. */
export async function readRegularFile(path: string, limits: RegularFileLimits): Promise<Buffer> {
  let handle;
  try {
    handle = await open(path, OPEN_FLAGS);
  } catch (e) {
    throw openError(path, limits.what, e);
  }
  try {
    checkStats(path, limits, await handle.stat());
    const chunks = new Chunks(path, limits);
    for (;;) {
      const buf = chunks.next();
      const { bytesRead } = await handle.read(buf, 0, buf.length, null);
      if (bytesRead === 0) return chunks.done();
      chunks.add(buf, bytesRead);
    }
  } catch (e) {
    throw openError(path, limits.what, e);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** The same, blocking: only for the start, before the ports open. Throws a FileReadError. */
export function readRegularFileSync(path: string, limits: RegularFileLimits): Buffer {
  let fd: number;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (e) {
    throw openError(path, limits.what, e);
  }
  try {
    checkStats(path, limits, fstatSync(fd));
    const chunks = new Chunks(path, limits);
    for (;;) {
      const buf = chunks.next();
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) return chunks.done();
      chunks.add(buf, n);
    }
  } catch (e) {
    throw openError(path, limits.what, e);
  } finally {
    closeSync(fd);
  }
}

/** Reads of a large file go to the thread pool in pieces of this size (the loop stays free between them). */
const WHOLE_READ_PIECE = 8 * 1024 * 1024;

/**
 * Opens `path` for reading only if it is a regular file of at most `limits.maxBytes` (a FIFO is
 * refused at once, never waited on; a device such as /dev/zero is refused, never read). Returns the
 * descriptor, the caller's to close, and the size. Throws a FileReadError.
 */
export function openRegularFileSync(path: string, limits: RegularFileLimits): { fd: number; size: number } {
  let fd: number;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (e) {
    throw openError(path, limits.what, e);
  }
  try {
    const st = fstatSync(fd);
    checkStats(path, limits, st);
    return { fd, size: st.size };
  } catch (e) {
    closeSync(fd);
    throw openError(path, limits.what, e);
  }
}

/**
 * A large file read whole into one buffer of the size fstat gives (a snapshot of a gigabyte is held
 * once, not as chunks joined), in libuv's thread pool, once it is known to be a regular file of at
 * most the bound. A file the server itself replaces by rename (a snapshot) or only appends to (the
 * journal) does not grow under the read; what is read is what fstat measured. Rejects with a FileReadError.
 */
export async function readWholeRegularFile(path: string, limits: RegularFileLimits): Promise<Buffer> {
  let handle;
  try {
    handle = await open(path, OPEN_FLAGS);
  } catch (e) {
    throw openError(path, limits.what, e);
  }
  try {
    const st = await handle.stat();
    checkStats(path, limits, st);
    const buf = Buffer.allocUnsafe(st.size);
    let got = 0;
    while (got < st.size) {
      const { bytesRead } = await handle.read(buf, got, Math.min(WHOLE_READ_PIECE, st.size - got), got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return got === st.size ? buf : buf.subarray(0, got);
  } catch (e) {
    throw openError(path, limits.what, e);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** The same, blocking: for `check` and the start before the ports open. Throws a FileReadError. */
export function readWholeRegularFileSync(path: string, limits: RegularFileLimits): Buffer {
  const { fd, size } = openRegularFileSync(path, limits);
  try {
    const buf = Buffer.allocUnsafe(size);
    let got = 0;
    while (got < size) {
      const n = readSync(fd, buf, got, size - got, got);
      if (n === 0) break;
      got += n;
    }
    return got === size ? buf : buf.subarray(0, got);
  } catch (e) {
    throw openError(path, limits.what, e);
  } finally {
    closeSync(fd);
  }
}
