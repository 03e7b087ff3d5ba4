/**
 * The `backend` setting (docs/backend.md): where the limiter state lives when several cellgate
 * sidecars share their limits.
 *
 *   redis://[[user]:password@]host:port[/db]        one Redis
 *   rediss://[[user]:password@]host:port[/db]       one Redis over TLS
 *   redis-cluster://[[user]:password@]host:port[,host:port...]   seed nodes of a Redis Cluster
 *   rediss-cluster://...                            the same over TLS
 *   redis-sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/db]
 *                                                   the master a set of Sentinels names (the
 *                                                   credentials are the master's; the Sentinels'
 *                                                   own are settings: backend-sentinel-username,
 *                                                   backend-sentinel-password)
 *
 * Credentials are percent-decoded (a password may hold any byte); the display form, for INFO and the
 * log, never shows the password.
 */

export interface BackendNode {
  host: string;
  port: number;
}

export interface BackendTarget {
  /** One Redis (standalone, or the master Sentinels name), or a Redis Cluster. */
  mode: 'standalone' | 'cluster' | 'sentinel';
  /** Sentinel: the master's name the Sentinels know it by; '' otherwise. */
  masterName: string;
  tls: boolean;
  nodes: BackendNode[];
  username: string | undefined;
  password: string | undefined;
  db: number;
  /** The URL with the password as `***`. */
  display: string;
}

const DEFAULT_PORT = 6379;
const DEFAULT_SENTINEL_PORT = 26379;

/** Parses a backend URL, or throws an Error whose message says what is wrong with it. */
export function parseBackendUrl(url: string): BackendTarget {
  const match = /^(redis|rediss|redis-cluster|rediss-cluster|redis-sentinel):\/\/(.*)$/i.exec(url);
  if (match === null) throw new Error(`backend '${url}': expected redis://, rediss://, redis-cluster://, rediss-cluster:// or redis-sentinel://`);
  const scheme = match[1].toLowerCase();
  let rest = match[2];
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  let credentials = '';
  if (at !== -1) {
    credentials = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = credentials.indexOf(':');
    const user = decode(colon === -1 ? credentials : credentials.slice(0, colon));
    if (colon === -1) {
      // redis://secret@host: a lone word is the password of the default user, as redis-cli -u.
      password = user;
    } else {
      username = user === '' ? undefined : user;
      password = decode(credentials.slice(colon + 1));
    }
  }
  let db = 0;
  let masterName = '';
  if (scheme === 'redis-sentinel') {
    // host:port,.../<master name>[/db]
    const slash = rest.indexOf('/');
    const path = slash === -1 ? '' : rest.slice(slash + 1);
    if (slash !== -1) rest = rest.slice(0, slash);
    const parts = path.split('/');
    masterName = decode(parts[0]);
    if (masterName === '') throw new Error(`backend '${redact(url, credentials)}': redis-sentinel:// needs the master's name: redis-sentinel://host:port,host:port/<master name>`);
    if (parts.length > 2) throw new Error(`backend '${redact(url, credentials)}': expected /<master name>[/db] after the Sentinels`);
    rest = parts.length === 2 ? `${rest}/${parts[1]}` : rest;
  }
  const slash = rest.indexOf('/');
  if (slash !== -1) {
    const dbText = rest.slice(slash + 1);
    rest = rest.slice(0, slash);
    if (dbText !== '') {
      if (!/^\d{1,5}$/.test(dbText)) throw new Error(`backend '${redact(url, credentials)}': database '${dbText}' is not a number`);
      db = Number(dbText);
    }
  }
  const cluster = scheme === 'redis-cluster' || scheme === 'rediss-cluster';
  if (cluster && db !== 0) throw new Error(`backend '${redact(url, credentials)}': a Redis Cluster has only database 0`);
  const hosts = rest.split(',').filter((h) => h !== '');
  if (hosts.length === 0) throw new Error(`backend '${redact(url, credentials)}': no host`);
  const sentinel = scheme === 'redis-sentinel';
  if (!cluster && !sentinel && hosts.length > 1) throw new Error(`backend '${redact(url, credentials)}': several hosts need redis-cluster:// (or redis-sentinel://)`);
  const nodes = hosts.map((h) => parseHostPort(h, url, credentials, sentinel ? DEFAULT_SENTINEL_PORT : DEFAULT_PORT));
  return {
    mode: cluster ? 'cluster' : sentinel ? 'sentinel' : 'standalone',
    masterName,
    tls: scheme === 'rediss' || scheme === 'rediss-cluster',
    nodes,
    username,
    password,
    db,
    display: redact(url, credentials),
  };
}

function parseHostPort(text: string, url: string, credentials: string, defaultPort: number): BackendNode {
  // [::1]:6379, host:6379, host
  const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  let host: string;
  let portText: string | undefined;
  if (bracket !== null) {
    host = bracket[1];
    portText = bracket[2];
  } else {
    const colon = text.lastIndexOf(':');
    host = colon === -1 ? text : text.slice(0, colon);
    portText = colon === -1 ? undefined : text.slice(colon + 1);
  }
  const port = portText === undefined ? defaultPort : Number(portText);
  if (host === '' || !Number.isInteger(port) || port < 1 || port > 65535 || (portText !== undefined && !/^\d+$/.test(portText))) {
    throw new Error(`backend '${redact(url, credentials)}': '${text}' is not host:port`);
  }
  return { host, port };
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The URL with the credentials' password part replaced by `***`. */
function redact(url: string, credentials: string): string {
  if (credentials === '') return url;
  const colon = credentials.indexOf(':');
  const shown = colon === -1 ? '***' : `${credentials.slice(0, colon)}:***`;
  return url.replace(`${credentials}@`, `${shown}@`);
}
