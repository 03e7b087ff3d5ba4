/**
 * A set of TLS files (certificate, key, CA) kept in force while the files change under it: read at
 * start (a file that cannot be read, or a broken set, throws so the start is refused), then watched
 * through their paths (path-watcher.ts: a file replaced, a symlink swapped, a mounted Secret's
 * `..data` swap) and read again off the event loop when they change. A new set that differs from the
 * one in force is checked by its owner; a good one is taken (counted, handed to the owner), a broken
 * one (unreadable, not PEM, a key that is not the certificate's) is refused: logged, counted, its
 * reason kept, and the set in force stays.
 *
 * The backend's client certificate, the xDS client's and the gRPC port's all follow this cycle; what
 * each makes of the material (ioredis options, gRPC credentials, a server's secure context), and
 * how it says so, stays in its subclass.
 */
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { PathWatcher } from './path-watcher.js';
import { readRegularFile, readRegularFileSync, type RegularFileLimits } from './regular-file.js';

/** Largest certificate, key or CA bundle read. */
export const MAX_TLS_FILE_BYTES = 1024 * 1024;
/** Quiet time after a change before reading (a Secret's update writes in steps), and a look this often besides. */
const DEBOUNCE_MS = 200;
const POLL_MS = 2000;

/** One file of the set: its path ('' when not set) and the setting that names it, for the messages. */
export interface TlsFile {
  file: string;
  setting: string;
}

/** Where the set is. An owner may carry more (what its check needs) in a type extending this. */
export interface TlsFiles {
  cert: TlsFile;
  key: TlsFile;
  ca: TlsFile;
}

/** The PEM texts of one set, read together; null for a file not set. */
export interface TlsMaterial {
  cert: Buffer | null;
  key: Buffer | null;
  ca: Buffer | null;
}

/** A set read and checked, not yet in force (a CONFIG SET between its check and its apply). */
export interface PreparedTlsSet<F extends TlsFiles, T> {
  files: F;
  material: TlsMaterial;
  prepared: T;
}

/** Why a set was taken after the start. */
export type TlsTakenWhy = 'the files changed' | 'CONFIG SET';

/** Throws an Error naming the setting unless `pem` holds certificates that all parse. */
export function checkCertificates(pem: Buffer, setting: string): void {
  const blocks = pem.toString('latin1').match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new Error(`${setting}: no PEM certificate in it`);
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch (e) {
      throw new Error(`${setting}: a certificate in it does not parse (${(e as Error).message})`);
    }
  }
}

/** Throws an Error naming both settings unless the options make a secure context. */
export function checkPair(options: tls.SecureContextOptions, files: TlsFiles): void {
  try {
    // Refuses a key that does not parse or does not belong to the certificate.
    tls.createSecureContext(options);
  } catch (e) {
    throw new Error(`${files.cert.setting} and ${files.key.setting} do not make a pair (${(e as Error).message})`);
  }
}

function limits(f: TlsFile): RegularFileLimits {
  return { maxBytes: MAX_TLS_FILE_BYTES, what: f.setting };
}

function readSync(files: TlsFiles): TlsMaterial {
  const read = (f: TlsFile): Buffer | null => (f.file === '' ? null : readRegularFileSync(f.file, limits(f)));
  return { cert: read(files.cert), key: read(files.key), ca: read(files.ca) };
}

async function readAsync(files: TlsFiles): Promise<TlsMaterial> {
  const read = async (f: TlsFile): Promise<Buffer | null> => (f.file === '' ? null : readRegularFile(f.file, limits(f)));
  const [cert, key, ca] = await Promise.all([read(files.cert), read(files.key), read(files.ca)]);
  return { cert, key, ca };
}

function same(a: Buffer | null, b: Buffer | null): boolean {
  return a === null ? b === null : b !== null && a.equals(b);
}

function paths(files: TlsFiles): string[] {
  return [files.cert.file, files.key.file, files.ca.file].filter((p) => p !== '');
}

/**
 * The cycle, shared; a subclass says what a set must be (`check`) and what taking one does
 * (`taken`), and adds what its own users read.
 */
export abstract class TlsFileSet<F extends TlsFiles, T> {
  /** Sets taken after the start, and sets refused (the one in force kept): INFO and the metrics. */
  reloads = 0;
  reloadErrors = 0;
  lastError = '';
  private material: TlsMaterial;
  private current: T;
  private watcher: PathWatcher | null = null;
  private reading = false;
  private readAgain = false;
  private closed = false;

  /**
   * Reads and checks the files now (the start); throws an Error naming the setting. `name` prefixes
   * the warnings ('backend-tls').
   */
  constructor(
    private filesInForce: F,
    private readonly name: string,
    private readonly log: { warning(message: string): void },
  ) {
    this.material = readSync(filesInForce);
    this.current = this.check(this.material, filesInForce);
  }

  /**
   * Checks a set read; returns what the subclass puts in force; throws an Error naming the setting.
   * Called from this constructor too: it must not use the subclass's own fields.
   */
  protected abstract check(material: TlsMaterial, files: F): T;

  /** A set taken after the start (counters already updated): put it in force and say so. */
  protected abstract taken(prepared: T, why: TlsTakenWhy): void;

  get files(): F {
    return this.filesInForce;
  }

  /** What `check` made of the set in force. */
  get prepared(): T {
    return this.current;
  }

  /** Watches the files in force (again, when they were changed); a change is read off the event loop. */
  async watch(): Promise<void> {
    this.watcher?.close();
    this.watcher = null;
    const watched = paths(this.filesInForce);
    if (watched.length === 0 || this.closed) return;
    const watcher = new PathWatcher(watched, () => this.reload(), {
      debounceMs: DEBOUNCE_MS,
      pollMs: POLL_MS,
      onWarning: (message) => this.log.warning(`${this.name}: ${message}`),
    });
    this.watcher = watcher;
    await watcher.start();
    // Closed, or other files named, while it started.
    if (this.closed || this.watcher !== watcher) watcher.close();
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
  }

  /** Other files named (CONFIG SET): they are read off the event loop and offered, and watched from then on. */
  protected useFiles(files: F): void {
    const before = paths(this.filesInForce).join('\0');
    this.filesInForce = files;
    if (paths(files).join('\0') !== before) this.rewatch();
    this.reload();
  }

  /** Reads and checks the files `files` name now (a few small files, so a reply can say whether they are good); throws. */
  protected prepare(files: F): PreparedTlsSet<F, T> {
    const material = readSync(files);
    return { files, material, prepared: this.check(material, files) };
  }

  /** Puts a prepared set in force and watches its files. */
  protected put(set: PreparedTlsSet<F, T>, why: TlsTakenWhy): void {
    this.filesInForce = set.files;
    this.take(set.material, set.prepared, why);
    this.rewatch();
  }

  /** Watches again without waiting; a failure to watch is logged, the set in force stays. */
  private rewatch(): void {
    void this.watch().catch((e: Error) => this.log.warning(`${this.name}: cannot watch the files: ${e.message}`));
  }

  /** One read at a time; a change seen meanwhile reads again once it ends. */
  private reload(): void {
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    const files = this.filesInForce;
    readAsync(files).then(
      (m) => this.offer(files, m),
      (e: unknown) => this.refuse(files, (e as Error).message),
    ).finally(() => {
      this.reading = false;
      if (this.readAgain && !this.closed) {
        this.readAgain = false;
        this.reload();
      }
    });
  }

  private offer(files: F, m: TlsMaterial): void {
    // Files named since the read began are read again (readAgain), not judged on the old ones.
    if (this.closed || files !== this.filesInForce) return;
    const old = this.material;
    if (same(m.cert, old.cert) && same(m.key, old.key) && same(m.ca, old.ca)) return;
    let prepared: T;
    try {
      prepared = this.check(m, files);
    } catch (e) {
      this.refuse(files, (e as Error).message);
      return;
    }
    this.take(m, prepared, 'the files changed');
  }

  private take(m: TlsMaterial, prepared: T, why: TlsTakenWhy): void {
    this.material = m;
    this.current = prepared;
    this.reloads++;
    this.lastError = '';
    this.taken(prepared, why);
  }

  private refuse(files: F, reason: string): void {
    if (this.closed || files !== this.filesInForce) return;
    this.reloadErrors++;
    this.lastError = reason;
    this.log.warning(`${this.name}: the changed files were not taken (${reason}); the certificate, key and CA in force stay`);
  }
}
