/**
 * The xDS client's TLS material (`rls-xds-tls-cert-file`, `-key-file`, `-ca-cert-file`): read at
 * start (a file that cannot be read or a broken pair refuses the start), then watched through their
 * paths (src/files/tls-file-set.ts: a file replaced, a symlink swapped, a mounted Secret's `..data`
 * swap) and read again when they change. A good new set replaces the credentials and the client
 * reconnects with them; a broken one (unreadable, not PEM, a key that is not the certificate's) is
 * logged and counted, and the set in force stays.
 *
 * As envoyproxy/ratelimit's xDS client: the CA is trusted besides the system's roots, and the
 * certificate and key are sent only when both are given.
 */
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { checkCertificates, checkPair, TlsFileSet, type TlsFiles, type TlsMaterial } from '../../files/tls-file-set.js';

export interface XdsTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

const SETTING = { cert: 'rls-xds-tls-cert-file', key: 'rls-xds-tls-key-file', ca: 'rls-xds-tls-ca-cert-file' } as const;

export interface CredentialsEvents {
  /** A new good set is in force: reconnect with it. */
  rotated(): void;
  warning(message: string): void;
  notice(message: string): void;
}

/** The xDS client's files; `reloads`, `reloadErrors` and `lastError` feed INFO and the metrics. */
export class XdsCredentials extends TlsFileSet<TlsFiles, grpc.ChannelCredentials> {
  /** Reads the files now (the start, before any port opens); throws an Error naming the setting. */
  constructor(
    files: XdsTlsFiles,
    private readonly events: CredentialsEvents,
  ) {
    super({ cert: { file: files.certFile, setting: SETTING.cert }, key: { file: files.keyFile, setting: SETTING.key }, ca: { file: files.caFile, setting: SETTING.ca } }, 'rls-xds-tls', events);
  }

  get credentials(): grpc.ChannelCredentials {
    return this.prepared;
  }

  /** Throws an Error naming the setting when the set cannot make a TLS client; else its credentials. */
  protected check(m: TlsMaterial, files: TlsFiles): grpc.ChannelCredentials {
    if (m.cert !== null) checkCertificates(m.cert, SETTING.cert);
    if (m.ca !== null) checkCertificates(m.ca, SETTING.ca);
    if (m.cert !== null && m.key !== null) checkPair({ cert: m.cert, key: m.key }, files);
    return credentialsOf(m);
  }

  protected taken(): void {
    this.events.notice('rls-xds-tls: the client certificate, key or CA changed: reconnecting to the xDS server with them');
    this.events.rotated();
  }
}

function credentialsOf(m: TlsMaterial): grpc.ChannelCredentials {
  // The system's roots and the given CA, as envoyproxy/ratelimit adds its CA to x509.SystemCertPool.
  const roots = m.ca === null ? null : Buffer.concat([Buffer.from(tls.rootCertificates.join('\n') + '\n'), m.ca]);
  const pair = m.cert !== null && m.key !== null;
  return grpc.credentials.createSsl(roots, pair ? m.key : null, pair ? m.cert : null);
}
