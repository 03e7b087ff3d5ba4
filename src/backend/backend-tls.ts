/**
 * The backend connections' TLS material (`backend-tls-cert-file`, `-key-file`, `-ca-cert-file`;
 * docs/backend.md, "TLS"): read at start (a file that cannot be read, or a broken set, refuses the
 * start), then watched through their paths (src/files/path-watcher.ts: a file replaced, a symlink
 * swapped, a mounted Secret's `..data` swap) and read again when they change or when CONFIG SET
 * names other files. A good new set is in force for every connection opened from then on (ioredis
 * reads the TLS options at each connect: the one options object every connection shares is updated
 * in place); the connections already open keep the session they authenticated, as a TLS client
 * does. A broken set (unreadable, not PEM, a key that is not the certificate's) is logged and
 * counted, and the set in force stays.
 *
 * The CA is trusted besides the system's roots (as envoyproxy/ratelimit's REDIS_TLS_CACERT); the
 * certificate and key are sent only when both are given.
 */
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import { PathWatcher } from '../files/path-watcher.js';
import { readRegularFile, readRegularFileSync, type RegularFileLimits } from '../files/regular-file.js';

/** Largest certificate, key or CA bundle read. */
export const MAX_TLS_FILE_BYTES = 1024 * 1024;
/** Quiet time after a change before reading (a Secret's update writes in steps), and a look this often besides. */
const DEBOUNCE_MS = 200;
const POLL_MS = 2000;

export interface BackendTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

interface Material {
  cert: Buffer | null;
  key: Buffer | null;
  ca: Buffer | null;
}

const SETTING = { cert: 'backend-tls-cert-file', key: 'backend-tls-key-file', ca: 'backend-tls-ca-cert-file' } as const;

/** Throws an Error naming the setting when the set cannot make a TLS client. */
function check(m: Material): void {
  if ((m.cert === null) !== (m.key === null)) throw new Error(`${SETTING.cert} and ${SETTING.key} go together: one is set without the other`);
  for (const [name, pem] of [['cert', m.cert], ['ca', m.ca]] as const) {
    if (pem === null) continue;
    const blocks = pem.toString('latin1').match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
    if (blocks.length === 0) throw new Error(`${SETTING[name]}: no PEM certificate in it`);
    for (const block of blocks) {
      try {
        new X509Certificate(block);
      } catch (e) {
        throw new Error(`${SETTING[name]}: a certificate in it does not parse (${(e as Error).message})`);
      }
    }
  }
  if (m.cert !== null && m.key !== null) {
    try {
      // Refuses a key that does not belong to the certificate, or a key that does not parse.
      tls.createSecureContext({ cert: m.cert, key: m.key });
    } catch (e) {
      throw new Error(`${SETTING.cert} and ${SETTING.key} do not make a pair (${(e as Error).message})`);
    }
  }
}

function same(a: Buffer | null, b: Buffer | null): boolean {
  return a === null ? b === null : b !== null && a.equals(b);
}

export interface BackendTlsEvents {
  warning(message: string): void;
  notice(message: string): void;
}

export class BackendTls {
  /** Sets taken after the start, and sets refused (the one in force kept): INFO backend. */
  reloads = 0;
  reloadErrors = 0;
  lastError = '';
  /**
   * The TLS options every backend connection is made with (ioredis's `tls`), updated in place
   * when a new set is taken.
   */
  readonly options: tls.ConnectionOptions = {};
  private material: Material;
  private watcher: PathWatcher | null = null;
  private reading = false;
  private readAgain = false;
  private closed = false;

  /** Reads the files now (the start); throws an Error naming the setting. */
  constructor(
    private files: BackendTlsFiles,
    private readonly events: BackendTlsEvents,
  ) {
    const read = (path: string, what: string): Buffer | null => (path === '' ? null : readRegularFileSync(path, limits(what)));
    this.material = { cert: read(files.certFile, SETTING.cert), key: read(files.keyFile, SETTING.key), ca: read(files.caFile, SETTING.ca) };
    check(this.material);
    this.apply(this.material);
  }

  /** Whether any file is named (TLS material beyond the system's roots). */
  get configured(): boolean {
    return this.files.certFile !== '' || this.files.keyFile !== '' || this.files.caFile !== '';
  }

  /** Watches the files; a change is read off the event loop. */
  async watch(): Promise<void> {
    this.watcher?.close();
    this.watcher = null;
    const paths = [this.files.certFile, this.files.keyFile, this.files.caFile].filter((p) => p !== '');
    if (paths.length === 0 || this.closed) return;
    const watcher = new PathWatcher(paths, () => this.reload(), {
      debounceMs: DEBOUNCE_MS,
      pollMs: POLL_MS,
      onWarning: (message) => this.events.warning(`backend-tls: ${message}`),
    });
    this.watcher = watcher;
    await watcher.start();
    if (this.closed) watcher.close();
  }

  /** CONFIG SET of a backend-tls-* setting: the named files are read now and watched from then on. */
  setFiles(files: BackendTlsFiles): void {
    const changed = files.certFile !== this.files.certFile || files.keyFile !== this.files.keyFile || files.caFile !== this.files.caFile;
    this.files = files;
    if (changed) void this.watch().catch((e: Error) => this.events.warning(`backend-tls: cannot watch the files: ${e.message}`));
    this.reload();
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
  }

  private reload(): void {
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    this.readAll().then(
      (m) => this.offer(m),
      (e: unknown) => this.refuse((e as Error).message),
    ).finally(() => {
      this.reading = false;
      if (this.readAgain) {
        this.readAgain = false;
        this.reload();
      }
    });
  }

  private async readAll(): Promise<Material> {
    const read = async (path: string, what: string): Promise<Buffer | null> => (path === '' ? null : readRegularFile(path, limits(what)));
    const [cert, key, ca] = await Promise.all([read(this.files.certFile, SETTING.cert), read(this.files.keyFile, SETTING.key), read(this.files.caFile, SETTING.ca)]);
    return { cert, key, ca };
  }

  private offer(m: Material): void {
    if (this.closed) return;
    if (same(m.cert, this.material.cert) && same(m.key, this.material.key) && same(m.ca, this.material.ca)) return;
    try {
      check(m);
    } catch (e) {
      this.refuse((e as Error).message);
      return;
    }
    this.material = m;
    this.apply(m);
    this.reloads++;
    this.lastError = '';
    this.events.notice('backend-tls: the client certificate, key or CA changed: new backend connections use them');
  }

  private refuse(reason: string): void {
    if (this.closed) return;
    this.reloadErrors++;
    this.lastError = reason;
    this.events.warning(`backend-tls: the changed files were not taken (${reason}); the certificate, key and CA in force stay`);
  }

  private apply(m: Material): void {
    const o = this.options as { cert?: Buffer; key?: Buffer; ca?: (string | Buffer)[] };
    delete o.cert;
    delete o.key;
    delete o.ca;
    if (m.cert !== null && m.key !== null) {
      o.cert = m.cert;
      o.key = m.key;
    }
    // The system's roots and the given CA.
    if (m.ca !== null) o.ca = [...tls.rootCertificates, m.ca];
  }
}

function limits(what: string): RegularFileLimits {
  return { maxBytes: MAX_TLS_FILE_BYTES, what };
}
