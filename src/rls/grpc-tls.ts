/**
 * The gRPC port's TLS material (`rls-tls`): `rls-tls-cert-file`, `rls-tls-key-file` and
 * `rls-tls-ca-cert-file`, each defaulting to the RESP server's `tls-*` file of the same role, and
 * `rls-tls-client-san`. Read at start (a file that cannot be read or a broken pair refuses the
 * start), then watched through their paths (src/files/tls-file-set.ts: a file replaced, a symlink
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
import { createPrivateKey } from 'node:crypto';
import tls from 'node:tls';
import type { Config } from '../config.js';
import { checkCertificates, checkPair, TlsFileSet, type PreparedTlsSet, type TlsFiles, type TlsMaterial, type TlsTakenWhy } from '../files/tls-file-set.js';

/** The settings that decide the material: a CONFIG SET of one of them reloads it. */
export const RLS_TLS_SETTINGS = ['rls-tls-cert-file', 'rls-tls-key-file', 'rls-tls-ca-cert-file', 'rls-tls-client-san', 'tls-cert-file', 'tls-key-file', 'tls-key-file-pass', 'tls-ca-cert-file'];

/** Where the material is, resolved from the settings (no CA: its file is ''), and how it serves. */
interface Sources extends TlsFiles {
  pass: string;
  requireClientCert: boolean;
  san: string;
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
  let ca = { file: '', setting: 'rls-tls-ca-cert-file' };
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

export interface TlsEvents {
  /** A new set is in force: new connections get it. */
  apply(options: tls.SecureContextOptions, requireClientCert: boolean): void;
  notice(message: string): void;
  warning(message: string): void;
}

/** The gRPC port's files; `reloads`, `reloadErrors` and `lastError` feed INFO and the metrics. */
export class RlsTlsMaterial extends TlsFileSet<Sources, tls.SecureContextOptions> {
  /** A CONFIG SET checked and not yet applied. */
  private staged: PreparedTlsSet<Sources, tls.SecureContextOptions> | null = null;

  /** Reads and checks the files now (the start); throws an Error naming the setting. */
  constructor(
    config: Config,
    private readonly events: TlsEvents,
  ) {
    super(sources((n) => config.get(n)), 'rls-tls', events);
  }

  /** The options in force (a TLS server's context). */
  get options(): tls.SecureContextOptions {
    return this.prepared;
  }

  get requireClientCert(): boolean {
    return this.files.requireClientCert;
  }

  get san(): string {
    return this.files.san;
  }

  /**
   * CONFIG SET, before anything is changed: reads and checks the files the new values name (a few
   * small files, read at once so the reply can say whether they are good). A refusal, or null.
   */
  checkConfigSet(get: (name: string) => string): string | null {
    this.staged = null;
    try {
      this.staged = this.prepare(sources(get));
      return null;
    } catch (e) {
      return `Unable to update the rate limit service's TLS configuration: ${(e as Error).message}`;
    }
  }

  /** CONFIG SET done: the checked set goes in force and its files are watched. */
  applyConfigSet(): void {
    const staged = this.staged;
    this.staged = null;
    if (staged !== null) this.put(staged, 'CONFIG SET');
  }

  /** Throws an Error naming the setting when the material cannot serve TLS; else the server's options. */
  protected check(m: TlsMaterial, s: Sources): tls.SecureContextOptions {
    // sources() names both files, so both were read.
    if (m.cert === null || m.key === null) throw new Error(`${s.cert.setting} and ${s.key.setting} are both needed`);
    checkCertificates(m.cert, s.cert.setting);
    if (m.ca !== null) checkCertificates(m.ca, s.ca.setting);
    let key = m.key;
    if (s.pass !== '') {
      try {
        key = Buffer.from(createPrivateKey({ key, passphrase: s.pass }).export({ type: 'pkcs8', format: 'pem' }) as string);
      } catch (e) {
        throw new Error(`${s.key.setting}: cannot decrypt it with tls-key-file-pass (${(e as Error).message})`);
      }
    }
    const options: tls.SecureContextOptions = { cert: m.cert, key, ...(m.ca === null ? {} : { ca: m.ca }), minVersion: 'TLSv1.2' };
    checkPair(options, s);
    return options;
  }

  protected taken(options: tls.SecureContextOptions, why: TlsTakenWhy): void {
    this.events.apply(options, this.files.requireClientCert);
    this.events.notice(`rls-tls: new certificate, key or CA in force for new gRPC connections (${why})`);
  }
}

/** Whether a verified client certificate carries `san` (a DNS name, wildcards as in a host check, or an IP). */
export function clientSanMatches(socket: tls.TLSSocket, san: string): boolean {
  const cert = socket.getPeerCertificate();
  if (cert === null || cert.raw === undefined) return false;
  return tls.checkServerIdentity(san, cert) === undefined;
}
