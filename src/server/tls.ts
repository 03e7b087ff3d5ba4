/**
 * TLS (docs/security.md), with Redis's configuration names: `tls-port`, `tls-cert-file`, `tls-key-file`
 * (`tls-key-file-pass`), `tls-ca-cert-file` and `tls-auth-clients` yes | no | optional. A TLS
 * connection, once its handshake is done, is an ordinary Client: same parser, limits, auth and
 * protected mode as plain TCP.
 */
import type tls from 'node:tls';
import type { Config } from '../config.js';
import { readRegularFileSync } from '../files/regular-file.js';

/**
 * The largest certificate, key or CA bundle read (a CA bundle of a few hundred certificates is
 * ~500 KB): with it, and regular files only (a FIFO is refused at once, never waited on; /dev/zero
 * never read), a file swapped under the server cannot stall or grow it. The files are small and
 * read at start or on CONFIG SET of one of them.
 */
export const MAX_TLS_FILE_BYTES = 1024 * 1024;

function readPem(config: Config, name: string): Buffer {
  const file = config.get(name);
  if (file === '') throw new Error(`tls-port is set but ${name} is not`);
  // FileReadError's message names the setting, the path and why (ENOENT, a FIFO, too big).
  return readRegularFileSync(file, { maxBytes: MAX_TLS_FILE_BYTES, what: name });
}

/**
 * The options of the TLS listener, read from the files at start. As Redis, a CA is needed to verify
 * client certificates (`tls-auth-clients yes`, the default, or `optional`); with `no` it may be omitted.
 * Throws with a one-line reason.
 */
export function createTlsServer(config: Config): tls.TlsOptions {
  const auth = config.get('tls-auth-clients');
  const options: tls.TlsOptions = {
    cert: readPem(config, 'tls-cert-file'),
    key: readPem(config, 'tls-key-file'),
    requestCert: auth !== 'no',
    // `optional`: a client without a certificate is let in; one with a bad certificate is refused
    // after the handshake (tlsPeerRefused), as Redis's SSL_VERIFY_PEER without FAIL_IF_NO_PEER_CERT.
    rejectUnauthorized: auth === 'yes',
    // `tls-handshake-timeout`: Node's timer restarts on every byte received; the server's periodic
    // task also bounds the whole handshake (a peer trickling its ClientHello ends there).
    handshakeTimeout: config.int('tls-handshake-timeout'),
    minVersion: 'TLSv1.2',
  };
  const pass = config.get('tls-key-file-pass');
  if (pass !== '') options.passphrase = pass;
  if (config.get('tls-ca-cert-file') !== '') options.ca = readPem(config, 'tls-ca-cert-file');
  else if (auth !== 'no') throw new Error(`tls-auth-clients ${auth} needs tls-ca-cert-file (the CA that signs client certificates)`);
  return options;
}

/** With `tls-auth-clients optional`: a client that presented a certificate the CA does not vouch for. */
export function tlsPeerRefused(config: Config, socket: tls.TLSSocket): boolean {
  if (config.get('tls-auth-clients') !== 'optional' || socket.authorized) return false;
  const peer = socket.getPeerCertificate();
  return peer !== null && Object.keys(peer).length > 0;
}
