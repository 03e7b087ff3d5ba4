/**
 * The xDS client's TLS material (`rls-xds-tls-cert-file`, `-key-file`, `-ca-cert-file`): read at
 * start (a file that cannot be read or a broken pair refuses the start), then watched through their
 * paths (src/files/path-watcher.ts: a file replaced, a symlink swapped, a mounted Secret's `..data`
 * swap) and read again when they change. A good new set replaces the credentials and the client
 * reconnects with them; a broken one (unreadable, not PEM, a key that is not the certificate's) is
 * logged and counted, and the set in force stays.
 *
 * As envoyproxy/ratelimit's xDS client: the CA is trusted besides the system's roots, and the
 * certificate and key are sent only when both are given.
 */
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { PathWatcher } from '../../files/path-watcher.js';
import { readRegularFile, readRegularFileSync, type RegularFileLimits } from '../../files/regular-file.js';

/** Largest certificate, key or CA bundle read. */
export const MAX_TLS_FILE_BYTES = 1024 * 1024;
/** Quiet time after a change before reading (a Secret's update writes in steps), and a look this often besides. */
const DEBOUNCE_MS = 200;
const POLL_MS = 2000;

export interface XdsTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

/** The PEM texts of one set, read together. */
interface Material {
  cert: Buffer | null;
  key: Buffer | null;
  ca: Buffer | null;
}

const SETTING = { cert: 'rls-xds-tls-cert-file', key: 'rls-xds-tls-key-file', ca: 'rls-xds-tls-ca-cert-file' } as const;

/** Throws an Error naming the setting when the set cannot make a TLS client. */
function check(m: Material): void {
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

export interface CredentialsEvents {
  /** A new good set is in force: reconnect with it. */
  rotated(): void;
  warning(message: string): void;
  notice(message: string): void;
}

export class XdsCredentials {
  /** Rotations applied, and sets refused (the one in force kept), for INFO and the metrics. */
  reloads = 0;
  reloadErrors = 0;
  lastError = '';
  private material: Material;
  private current: grpc.ChannelCredentials;
  private watcher: PathWatcher | null = null;
  private reading = false;
  private readAgain = false;

  /** Reads the files now (the start, before any port opens); throws an Error naming the setting. */
  constructor(
    private readonly files: XdsTlsFiles,
    private readonly events: CredentialsEvents,
  ) {
    const read = (path: string, what: string): Buffer | null => (path === '' ? null : readRegularFileSync(path, limits(what)));
    this.material = { cert: read(files.certFile, SETTING.cert), key: read(files.keyFile, SETTING.key), ca: read(files.caFile, SETTING.ca) };
    check(this.material);
    this.current = credentialsOf(this.material);
  }

  get credentials(): grpc.ChannelCredentials {
    return this.current;
  }

  /** Watches the files; a change is read off the event loop. */
  async watch(): Promise<void> {
    const paths = [this.files.certFile, this.files.keyFile, this.files.caFile].filter((p) => p !== '');
    if (paths.length === 0) return;
    this.watcher = new PathWatcher(paths, () => this.reload(), {
      debounceMs: DEBOUNCE_MS,
      pollMs: POLL_MS,
      onWarning: (message) => this.events.warning(`rls-xds-tls: ${message}`),
    });
    await this.watcher.start();
  }

  close(): void {
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
    if (same(m.cert, this.material.cert) && same(m.key, this.material.key) && same(m.ca, this.material.ca)) return;
    try {
      check(m);
    } catch (e) {
      this.refuse((e as Error).message);
      return;
    }
    this.material = m;
    this.current = credentialsOf(m);
    this.reloads++;
    this.lastError = '';
    this.events.notice('rls-xds-tls: the client certificate, key or CA changed: reconnecting to the xDS server with them');
    this.events.rotated();
  }

  private refuse(reason: string): void {
    this.reloadErrors++;
    this.lastError = reason;
    this.events.warning(`rls-xds-tls: the changed files were not taken (${reason}); the certificate, key and CA in force stay`);
  }
}

function limits(what: string): RegularFileLimits {
  return { maxBytes: MAX_TLS_FILE_BYTES, what };
}

function credentialsOf(m: Material): grpc.ChannelCredentials {
  // The system's roots and the given CA, as envoyproxy/ratelimit adds its CA to x509.SystemCertPool.
  const roots = m.ca === null ? null : Buffer.concat([Buffer.from(tls.rootCertificates.join('\n') + '\n'), m.ca]);
  const pair = m.cert !== null && m.key !== null;
  return grpc.credentials.createSsl(roots, pair ? m.key : null, pair ? m.cert : null);
}
