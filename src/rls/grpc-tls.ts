/**
 * The gRPC port's TLS material (`rls-tls`): `rls-tls-cert-file`, `rls-tls-key-file` and
 * `rls-tls-ca-cert-file`, each defaulting to the RESP server's `tls-*` file of the same role, and
 * `rls-tls-client-san`. Read at start (a file that cannot be read or a broken pair refuses the
 * start), then watched through their paths (src/files/path-watcher.ts: a file replaced, a symlink
 * swapped, a mounted Secret's `..data` swap) and read again, off the event loop, when they change;
 * `CONFIG SET` of any of those settings (or of the `tls-*` files they default to) reads them at
 * once and is refused if they do not make a good set. A good new set serves every connection that
 * starts after it; connections open keep theirs (as envoyproxy/ratelimit's certificate provider). A
 * broken one (unreadable, not PEM, a key that is not the certificate's) is logged and counted, and
 * the set in force stays.
 *
 * Client certificates: with any rls-tls-* file set, required and verified exactly when
 * `rls-tls-ca-cert-file` is set (as envoyproxy/ratelimit requires them when GRPC_CLIENT_TLS_CACERT
 * is set); with only the RESP server's files, as `tls-auth-clients` says (`yes`: required against
 * tls-ca-cert-file; `no` and `optional`: none asked, as before the port had files of its own). `rls-tls-client-san`: the name a client certificate must carry (its
 * DNS or IP subject alternative names, checked as a host name is; envoyproxy/ratelimit's
 * GRPC_CLIENT_TLS_SAN). Unlike envoyproxy/ratelimit, the system's roots are not trusted for client
 * certificates: only the CA given.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import type { Config } from '../config.js';
import { PathWatcher } from '../files/path-watcher.js';
import { readRegularFile, readRegularFileSync } from '../files/regular-file.js';

/** Largest certificate, key or CA bundle read. */
export const MAX_TLS_FILE_BYTES = 1024 * 1024;
const DEBOUNCE_MS = 200;
const POLL_MS = 2000;

/** The settings that decide the material: a CONFIG SET of one of them reloads it. */
export const RLS_TLS_SETTINGS = ['rls-tls-cert-file', 'rls-tls-key-file', 'rls-tls-ca-cert-file', 'rls-tls-client-san', 'tls-cert-file', 'tls-key-file', 'tls-key-file-pass', 'tls-ca-cert-file'];

/** Where the material is, resolved from the settings. */
interface Sources {
  cert: { file: string; setting: string };
  key: { file: string; setting: string };
  ca: { file: string; setting: string } | null;
  pass: string;
  requireClientCert: boolean;
  san: string;
}

/** What one read of the files gave, checked. */
interface Material {
  cert: Buffer;
  key: Buffer;
  ca: Buffer | null;
}

function sources(get: (name: string) => string): Sources {
  const pick = (own: string, shared: string): { file: string; setting: string } =>
    get(own) !== '' ? { file: get(own), setting: own } : { file: get(shared), setting: shared };
  const cert = pick('rls-tls-cert-file', 'tls-cert-file');
  const key = pick('rls-tls-key-file', 'tls-key-file');
  if (cert.file === '') throw new Error('rls-tls is yes but neither rls-tls-cert-file nor tls-cert-file is set');
  if (key.file === '') throw new Error('rls-tls is yes but neither rls-tls-key-file nor tls-key-file is set');
  const ownCa = get('rls-tls-ca-cert-file');
  // The port's own files: envoyproxy/ratelimit's rule, client certificates exactly when a CA is set.
  // Only the RESP server's files: its tls-auth-clients rule, as before the port had files of its own.
  const own = ownCa !== '' || get('rls-tls-cert-file') !== '' || get('rls-tls-key-file') !== '';
  let ca: Sources['ca'] = null;
  let requireClientCert = false;
  if (ownCa !== '') {
    ca = { file: ownCa, setting: 'rls-tls-ca-cert-file' };
    requireClientCert = true;
  } else if (!own && get('tls-auth-clients') === 'yes') {
    if (get('tls-ca-cert-file') === '') throw new Error('rls-tls with tls-auth-clients yes needs tls-ca-cert-file (or rls-tls-ca-cert-file)');
    ca = { file: get('tls-ca-cert-file'), setting: 'tls-ca-cert-file' };
    requireClientCert = true;
  }
  const san = get('rls-tls-client-san');
  if (san !== '' && !requireClientCert) throw new Error('rls-tls-client-san needs client certificates: set rls-tls-ca-cert-file');
  return { cert, key, ca, pass: get('tls-key-file-pass'), requireClientCert, san };
}

/** Throws an Error naming the setting when the material cannot serve TLS. */
function check(s: Sources, m: Material): tls.SecureContextOptions {
  const certs = (pem: Buffer, setting: string): void => {
    const blocks = pem.toString('latin1').match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
    if (blocks.length === 0) throw new Error(`${setting}: no PEM certificate in it`);
    for (const block of blocks) {
      try {
        new X509Certificate(block);
      } catch (e) {
        throw new Error(`${setting}: a certificate in it does not parse (${(e as Error).message})`);
      }
    }
  };
  certs(m.cert, s.cert.setting);
  if (m.ca !== null && s.ca !== null) certs(m.ca, s.ca.setting);
  let key = m.key;
  if (s.pass !== '') {
    try {
      key = Buffer.from(createPrivateKey({ key, passphrase: s.pass }).export({ type: 'pkcs8', format: 'pem' }) as string);
    } catch (e) {
      throw new Error(`${s.key.setting}: cannot decrypt it with tls-key-file-pass (${(e as Error).message})`);
    }
  }
  const options: tls.SecureContextOptions = { cert: m.cert, key, ...(m.ca === null ? {} : { ca: m.ca }), minVersion: 'TLSv1.2' };
  try {
    // Refuses a key that does not parse or does not belong to the certificate.
    tls.createSecureContext(options);
  } catch (e) {
    throw new Error(`${s.cert.setting} and ${s.key.setting} do not make a pair (${(e as Error).message})`);
  }
  return options;
}

function readSync(s: Sources): Material {
  const read = (f: { file: string; setting: string }): Buffer => readRegularFileSync(f.file, { maxBytes: MAX_TLS_FILE_BYTES, what: f.setting });
  return { cert: read(s.cert), key: read(s.key), ca: s.ca === null ? null : read(s.ca) };
}

async function readAsync(s: Sources): Promise<Material> {
  const read = (f: { file: string; setting: string }): Promise<Buffer> => readRegularFile(f.file, { maxBytes: MAX_TLS_FILE_BYTES, what: f.setting });
  const [cert, key, ca] = await Promise.all([read(s.cert), read(s.key), s.ca === null ? null : read(s.ca)]);
  return { cert, key, ca };
}

function same(a: Material, b: Material): boolean {
  return a.cert.equals(b.cert) && a.key.equals(b.key) && (a.ca === null ? b.ca === null : b.ca !== null && a.ca.equals(b.ca));
}

export interface TlsEvents {
  /** A new set is in force: new connections get it. */
  apply(options: tls.SecureContextOptions, requireClientCert: boolean): void;
  notice(message: string): void;
  warning(message: string): void;
}

export class RlsTlsMaterial {
  /** Sets taken after the start, and sets refused (the one in force kept): INFO and the metrics. */
  reloads = 0;
  reloadErrors = 0;
  lastError = '';
  private sources: Sources;
  private material: Material;
  /** The options in force (a TLS server's context and its client-certificate rule). */
  options: tls.SecureContextOptions;
  private watcher: PathWatcher | null = null;
  private reading = false;
  private readAgain = false;
  private closed = false;
  /** A CONFIG SET checked and not yet applied: its sources and material. */
  private staged: { sources: Sources; material: Material; options: tls.SecureContextOptions } | null = null;

  /** Reads and checks the files now (the start); throws an Error naming the setting. */
  constructor(
    config: Config,
    private readonly events: TlsEvents,
  ) {
    this.sources = sources((n) => config.get(n));
    this.material = readSync(this.sources);
    this.options = check(this.sources, this.material);
  }

  get requireClientCert(): boolean {
    return this.sources.requireClientCert;
  }

  get san(): string {
    return this.sources.san;
  }

  /** Watches the files in force; a change is read off the event loop. */
  async watch(): Promise<void> {
    this.watcher?.close();
    const s = this.sources;
    const paths = [s.cert.file, s.key.file, ...(s.ca === null ? [] : [s.ca.file])];
    const watcher = new PathWatcher(paths, () => this.reload(), {
      debounceMs: DEBOUNCE_MS,
      pollMs: POLL_MS,
      onWarning: (message) => this.events.warning(`rls-tls: ${message}`),
    });
    this.watcher = watcher;
    await watcher.start();
    if (this.closed || this.watcher !== watcher) watcher.close();
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
  }

  /**
   * CONFIG SET, before anything is changed: reads and checks the files the new values name (a few
   * small files, read at once so the reply can say whether they are good). A refusal, or null.
   */
  checkConfigSet(get: (name: string) => string): string | null {
    this.staged = null;
    try {
      const s = sources(get);
      const material = readSync(s);
      this.staged = { sources: s, material, options: check(s, material) };
      return null;
    } catch (e) {
      return `Unable to update the rate limit service's TLS configuration: ${(e as Error).message}`;
    }
  }

  /** CONFIG SET done: the checked set goes in force and its files are watched. */
  applyConfigSet(): void {
    const staged = this.staged;
    this.staged = null;
    if (staged === null) return;
    this.sources = staged.sources;
    this.take(staged.material, staged.options, 'CONFIG SET');
    void this.watch();
  }

  private reload(): void {
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    const s = this.sources;
    readAsync(s).then((m) => {
      if (this.closed || s !== this.sources || same(m, this.material)) return;
      let options: tls.SecureContextOptions;
      try {
        options = check(s, m);
      } catch (e) {
        this.refuse((e as Error).message);
        return;
      }
      this.take(m, options, 'the files changed');
    }, (e: unknown) => this.refuse((e as Error).message)).finally(() => {
      this.reading = false;
      if (this.readAgain && !this.closed) {
        this.readAgain = false;
        this.reload();
      }
    });
  }

  private take(m: Material, options: tls.SecureContextOptions, why: string): void {
    this.material = m;
    this.options = options;
    this.reloads++;
    this.lastError = '';
    this.events.apply(options, this.sources.requireClientCert);
    this.events.notice(`rls-tls: new certificate, key or CA in force for new gRPC connections (${why})`);
  }

  private refuse(reason: string): void {
    this.reloadErrors++;
    this.lastError = reason;
    this.events.warning(`rls-tls: the changed files were not taken (${reason}); the certificate, key and CA in force stay`);
  }
}

/** Whether a verified client certificate carries `san` (a DNS name, wildcards as in a host check, or an IP). */
export function clientSanMatches(socket: tls.TLSSocket, san: string): boolean {
  const cert = socket.getPeerCertificate();
  if (cert === null || cert.raw === undefined) return false;
  return tls.checkServerIdentity(san, cert) === undefined;
}
