/**
 * The `backend` setting (docs/backend.md): where the limiter state lives when several cellgate
 * sidecars share their limits.
 *
 *   redis://[[user]:password@]host:port[/db]        one Redis
 *   rediss://[[user]:password@]host:port[/db]       one Redis over TLS
 *   redis-cluster://[[user]:password@]host:port[,host:port...]   seed nodes of a Redis Cluster
 *
 * Credentials are percent-decoded (a password may hold any byte); the display form, for INFO and the
 * log, never shows the password.
 */

export interface BackendNode {
  host: string;
  port: number;
}

export interface BackendTarget {
  mode: 'standalone' | 'cluster';
  tls: boolean;
  nodes: BackendNode[];
  username: string | undefined;
  password: string | undefined;
  db: number;
  /** The URL with the password as `***`. */
  display: string;
}

const DEFAULT_PORT = 6379;

/** Parses a backend URL, or throws an Error whose message says what is wrong with it. */
export function parseBackendUrl(url: string): BackendTarget {
  const match = /^(redis|rediss|redis-cluster):\/\/(.*)$/i.exec(url);
  if (match === null) throw new Error(`backend '${url}': expected redis://, rediss:// or redis-cluster://`);
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
  const slash = rest.indexOf('/');
  if (slash !== -1) {
    const dbText = rest.slice(slash + 1);
    rest = rest.slice(0, slash);
    if (dbText !== '') {
      if (!/^\d{1,5}$/.test(dbText)) throw new Error(`backend '${redact(url, credentials)}': database '${dbText}' is not a number`);
      db = Number(dbText);
    }
  }
  const cluster = scheme === 'redis-cluster';
  if (cluster && db !== 0) throw new Error(`backend '${redact(url, credentials)}': a Redis Cluster has only database 0`);
  const hosts = rest.split(',').filter((h) => h !== '');
  if (hosts.length === 0) throw new Error(`backend '${redact(url, credentials)}': no host`);
  if (!cluster && hosts.length > 1) throw new Error(`backend '${redact(url, credentials)}': several hosts need redis-cluster://`);
  const nodes = hosts.map((h) => parseHostPort(h, url, credentials));
  return {
    mode: cluster ? 'cluster' : 'standalone',
    tls: scheme === 'rediss',
    nodes,
    username,
    password,
    db,
    display: redact(url, credentials),
  };
}

function parseHostPort(text: string, url: string, credentials: string): BackendNode {
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
  const port = portText === undefined ? DEFAULT_PORT : Number(portText);
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
