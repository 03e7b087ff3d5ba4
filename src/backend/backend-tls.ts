/**
 * The backend connections' TLS material (`backend-tls-cert-file`, `-key-file`, `-ca-cert-file`;
 * docs/backend.md, "TLS"): read at start (a file that cannot be read, or a broken set, refuses the
 * start), then watched through their paths (src/files/tls-file-set.ts: a file replaced, a symlink
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
import tls from 'node:tls';
import { checkCertificates, checkPair, TlsFileSet, type TlsFiles, type TlsMaterial } from '../files/tls-file-set.js';

export interface BackendTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

const SETTING = { cert: 'backend-tls-cert-file', key: 'backend-tls-key-file', ca: 'backend-tls-ca-cert-file' } as const;

function fileSet(f: BackendTlsFiles): TlsFiles {
  return { cert: { file: f.certFile, setting: SETTING.cert }, key: { file: f.keyFile, setting: SETTING.key }, ca: { file: f.caFile, setting: SETTING.ca } };
}

export interface BackendTlsEvents {
  warning(message: string): void;
  notice(message: string): void;
}

export class BackendTls extends TlsFileSet<TlsFiles, TlsMaterial> {
  /**
   * The TLS options every backend connection is made with (ioredis's `tls`), updated in place
   * when a new set is taken.
   */
  readonly options: tls.ConnectionOptions = {};

  /** Reads the files now (the start); throws an Error naming the setting. */
  constructor(
    files: BackendTlsFiles,
    private readonly events: BackendTlsEvents,
  ) {
    super(fileSet(files), 'backend-tls', events);
    this.apply(this.prepared);
  }

  /** Whether any file is named (TLS material beyond the system's roots). */
  get configured(): boolean {
    const f = this.files;
    return f.cert.file !== '' || f.key.file !== '' || f.ca.file !== '';
  }

  /** CONFIG SET of a backend-tls-* setting: the named files are read now and watched from then on. */
  setFiles(files: BackendTlsFiles): void {
    this.useFiles(fileSet(files));
  }

  /** Throws an Error naming the setting when the set cannot make a TLS client. */
  protected check(m: TlsMaterial, files: TlsFiles): TlsMaterial {
    if ((m.cert === null) !== (m.key === null)) throw new Error(`${SETTING.cert} and ${SETTING.key} go together: one is set without the other`);
    if (m.cert !== null) checkCertificates(m.cert, SETTING.cert);
    if (m.ca !== null) checkCertificates(m.ca, SETTING.ca);
    if (m.cert !== null && m.key !== null) checkPair({ cert: m.cert, key: m.key }, files);
    return m;
  }

  protected taken(m: TlsMaterial): void {
    this.apply(m);
    this.events.notice('backend-tls: the client certificate, key or CA changed: new backend connections use them');
  }

  private apply(m: TlsMaterial): void {
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
