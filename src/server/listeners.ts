/**
 * The listening sockets and admission: TCP (port, bind), the unix socket, TLS (tls-port, its
 * handshakes, which count toward maxclients until done), the metrics port's listeners; CONFIG SET
 * port/bind and the TLS files; and who is let in: maxclients (capped by the descriptor limit at
 * start), protected mode. A connection let in becomes a client of the server (Server.addClient).
 */
import net from 'node:net';
import { chmodSync, lstatSync, rmSync } from 'node:fs';
import tls from 'node:tls';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { METRICS_MAX_DESCRIPTORS, startMetrics } from './metrics.js';
import type { Stats } from './stats.js';
import { createTlsServer, tlsPeerRefused } from './tls.js';
import { errorText, type Tasks } from './tasks.js';
import { DescriptorBudget } from './fd-limit.js';
import type { Server } from './server.js';

/**
 * A refused connection (maxclients, protected mode) gets its one-line error, then is closed for good
 * (not half-closed: a peer that never closes its side would keep the descriptor); if the line cannot
 * be written within this bound, the socket is destroyed anyway.
 */
const REFUSED_CLOSE_MS = 1000;

export class Listeners {
  port = 0;
  /** The TLS port listened on, 0 without TLS. */
  tlsPort = 0;
  private listeners: net.Server[] = [];
  /** The plain TCP listeners (port, bind): CONFIG SET port/bind replaces them. */
  private tcpListeners: net.Server[] = [];
  /** The TLS listeners: CONFIG SET of the TLS files gives them a new certificate. */
  private tlsListeners: tls.Server[] = [];
  /** The TLS listeners' options (certificate, key, CA), for listeners opened later (CONFIG SET bind). */
  private tlsOptions: tls.TlsOptions | null = null;
  /** A CONFIG SET port/bind waiting for its listeners to bind (one at a time). */
  rebinding = false;
  /** The descriptor limit and reserve that cap maxclients (measured in open()). */
  private fdBudget = new DescriptorBudget(null, 0);
  /**
   * TLS connections whose handshake is not done yet, by peer address: they hold a descriptor, so
   * they count toward maxclients, and one that takes longer than `tls-handshake-timeout` is closed.
   */
  private readonly tlsHandshakes = new Map<string, { socket: net.Socket; sinceMs: number }>();
  private readonly config: Config;
  private readonly log: Logger;
  private readonly stats: Stats;
  private readonly tasks: Tasks;

  constructor(private readonly server: Server) {
    this.config = server.config;
    this.log = server.log;
    this.stats = server.stats;
    this.tasks = server.tasks;
  }

  /**
   * Binds every configured address on one port (and on `tls-port` with TLS, the unix socket, the
   * metrics port), then caps maxclients by the descriptor limit. Rejects with a one-line reason: a
   * port in use, a missing certificate; every listener opened is closed again then.
   */
  async open(): Promise<void> {
    const addresses = this.config.get('bind').split(/\s+/).filter(Boolean);
    let port = this.config.int('port');
    const failures: string[] = [];
    const tlsPortWanted = this.config.int('tls-port');
    const tlsOptions = tlsPortWanted > 0 ? createTlsServer(this.config) : null;
    const bound = await this.bindTcp(addresses, port);
    this.tcpListeners = bound.listeners;
    this.listeners.push(...bound.listeners);
    port = bound.port;
    failures.push(...bound.failures);
    const unixPath = this.config.get('unixsocket');
    if (unixPath !== '' && failures.length === 0) {
      try {
        this.listeners.push(await this.listenUnix(unixPath, parseInt(this.config.get('unixsocketperm'), 8)));
        this.log.notice(`listening on unix socket ${unixPath}`, { unixsocket: unixPath });
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        failures.push(`cannot listen on unix socket ${unixPath}: ${err.code === 'EADDRINUSE' ? 'address already in use' : (err.code ?? err.message)}`);
      }
    }
    if (tlsOptions !== null && failures.length === 0) {
      this.tlsOptions = tlsOptions;
      const boundTls = await this.bindTcp(addresses, tlsPortWanted, tlsOptions);
      this.tlsListeners = boundTls.listeners as tls.Server[];
      this.listeners.push(...boundTls.listeners);
      if (boundTls.listeners.length > 0) this.tlsPort = tlsPortWanted;
      failures.push(...boundTls.failures);
    }
    const metricsPort = this.config.int('metrics-port');
    if (metricsPort > 0 && failures.length === 0) {
      try {
        const metricsAddresses = this.config.get('metrics-bind').split(/\s+/).filter(Boolean);
        this.listeners.push(...(await startMetrics(this.server, metricsAddresses, metricsPort)));
        this.log.notice(`Prometheus metrics on port ${metricsPort} (/metrics) of ${metricsAddresses.join(' ')}`, { metrics_port: metricsPort, metrics_bind: metricsAddresses.join(' ') });
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        failures.push(`cannot listen for metrics on port ${metricsPort}: ${err.code === 'EADDRINUSE' ? 'address already in use' : (err.code ?? err.message)}`);
      }
    }
    if (failures.length > 0 || this.listeners.length === 0) {
      for (const l of this.listeners) l.close();
      throw new Error(failures[0] ?? 'no address to listen on');
    }
    if (this.tlsPort > 0) this.log.notice(`TLS on port ${this.tlsPort} (tls-auth-clients ${this.config.get('tls-auth-clients')})`, { tls_port: this.tlsPort });
    this.port = port;
    this.capMaxclients(metricsPort > 0 ? METRICS_MAX_DESCRIPTORS : 0);
  }

  /** Stops accepting (shutdown). */
  close(): void {
    for (const l of this.listeners) l.close();
  }

  /**
   * Listens on every address on one port (the first one bound picks it with port 0). An address
   * with a leading '-' (Redis's syntax), and ::1, may be unavailable; a port in use never is.
   */
  private async bindTcp(addresses: string[], port: number, tlsOptions?: tls.TlsOptions): Promise<{ listeners: net.Server[]; port: number; failures: string[] }> {
    const listeners: net.Server[] = [];
    const failures: string[] = [];
    const what = tlsOptions === undefined ? 'listen' : 'listen for TLS';
    for (const raw of addresses) {
      const optional = raw.startsWith('-') || raw === '::1';
      const address = raw.replace(/^-/, '');
      try {
        const listener = tlsOptions === undefined ? await this.listen(address, port) : await this.listenTls(tlsOptions, address, port);
        listeners.push(listener);
        port = (listener.address() as net.AddressInfo).port;
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        const reason = err.code === 'EADDRINUSE' ? 'address already in use' : err.code === 'EACCES' ? 'permission denied' : (err.code ?? err.message);
        if (optional && err.code !== 'EADDRINUSE') {
          this.log.warning(`could not bind ${address}:${port}: ${reason}`);
          continue;
        }
        failures.push(`cannot ${what} on ${address.includes(':') ? `[${address}]` : address}:${port}: ${reason}`);
      }
    }
    return { listeners, port, failures };
  }

  /**
   * CONFIG SET port/bind, as Redis's changeListener / changeBindAddr: the TCP listeners (and the TLS
   * ones, which follow `bind`) are closed, the new ones opened; if any fails, they are closed and
   * the old ones opened again, and the reason comes back (null on success). Connected clients stay
   * connected either way.
   */
  async rebind(bind: string, port: number): Promise<string | null> {
    const oldBind = this.config.get('bind');
    const oldPort = this.port;
    const withTls = this.tlsOptions !== null && bind !== oldBind;
    const closeAll = (ls: net.Server[]): void => {
      for (const l of ls) l.close();
      this.listeners = this.listeners.filter((l) => !ls.includes(l));
    };
    const open = async (b: string, p: number): Promise<string | null> => {
      const addresses = b.split(/\s+/).filter(Boolean);
      const bound = await this.bindTcp(addresses, p);
      this.tcpListeners = bound.listeners;
      this.listeners.push(...bound.listeners);
      let failures = bound.failures;
      if (failures.length === 0 && bound.listeners.length === 0) failures = ['no address to listen on'];
      if (failures.length === 0) this.port = bound.port;
      if (failures.length === 0 && withTls) {
        const boundTls = await this.bindTcp(addresses, this.tlsPort, this.tlsOptions!);
        this.tlsListeners = boundTls.listeners as tls.Server[];
        this.listeners.push(...boundTls.listeners);
        failures = boundTls.failures;
      }
      return failures[0] ?? null;
    };
    const closeCurrent = (): void => {
      closeAll(this.tcpListeners);
      this.tcpListeners = [];
      if (withTls) {
        closeAll(this.tlsListeners);
        this.tlsListeners = [];
      }
    };
    closeCurrent();
    const failure = await open(bind, port);
    if (failure === null) {
      this.log.notice(`listening on port ${this.port} of ${bind} (CONFIG SET)`, { port: this.port, bind });
      return null;
    }
    closeCurrent();
    this.log.warning(`CONFIG SET port/bind: ${failure}; listening on port ${oldPort} of ${oldBind} again`, { port: oldPort, bind: oldBind });
    const again = await open(oldBind, oldPort);
    if (again !== null) this.log.warning(`could not listen on the old addresses again: ${again}`);
    return failure;
  }

  /** Gives the TLS listeners a new certificate, key and CA (CONFIG SET tls-*-file): new handshakes use it. */
  reloadTls(context: tls.TlsOptions): void {
    this.tlsOptions = context;
    for (const l of this.tlsListeners) l.setSecureContext(context);
  }

  /** Whether TLS listeners are open (CONFIG SET of the TLS files then reloads the certificate). */
  get tlsActive(): boolean {
    return this.tlsListeners.length > 0;
  }

  /**
   * Lowers maxclients to what the descriptor limit allows, as Redis does at start (its
   * adjustOpenFilesLimit; Node cannot raise the limit, so there is no attempt to). Throws when the
   * limit leaves no room for a client at all, as Redis refuses to start.
   */
  private capMaxclients(extraReserved: number): void {
    this.fdBudget = DescriptorBudget.measure(extraReserved);
    const { limit, reserved } = this.fdBudget;
    const requested = this.config.int('maxclients');
    if (limit === null || requested + reserved <= limit) return;
    if (limit <= reserved) {
      for (const l of this.listeners) l.close();
      throw new Error(`Your current 'ulimit -n' of ${limit} is not enough for the server to start. Please increase your open file limit to at least ${reserved + 1}.`);
    }
    const allowed = this.fdBudget.maxClients(requested);
    this.config.set('maxclients', String(allowed));
    this.log.warning(
      `You requested maxclients of ${requested} requiring at least ${requested + reserved} max file descriptors. ` +
        `Current maximum open files is ${limit}. maxclients has been reduced to ${allowed} to compensate for low ulimit. ` +
        "If you need higher maxclients increase 'ulimit -n'.",
      { maxclients_requested: requested, maxclients: allowed, max_open_files: limit, reserved_fds: reserved },
    );
  }

  /** Why maxclients may not be set to `requested` (beyond the descriptor limit: Redis's updateMaxclients text), or null. */
  maxclientsRefusal(requested: number): string | null {
    const allowed = this.fdBudget.maxClients(requested);
    return allowed < requested ? `The operating system is not able to handle the specified number of clients, try with ${allowed}` : null;
  }

  private listen(address: string, port: number): Promise<net.Server> {
    return new Promise((resolve, reject) => {
      const listener = net.createServer({ noDelay: true }, (socket) => this.accept(socket));
      listener.once('error', reject);
      listener.listen({ host: address, port, ipv6Only: address.includes(':'), backlog: this.config.int('tcp-backlog') }, () => {
        listener.off('error', reject);
        listener.on('error', (e) => this.acceptFailed(e));
        resolve(listener);
      });
    });
  }

  /**
   * Listens on the unix socket `path`, as Redis's `unixsocket`: a socket file left by a server that
   * is gone (nothing answers on it) is replaced; a live one (another server) or a file that is not
   * a socket is refused, never deleted. `perm` (unixsocketperm, 0 = leave the umask's) is applied
   * right after the bind, before start() lets the snapshot load begin (as Redis, which chmods after
   * listen); the file is removed at exit.
   */
  private async listenUnix(path: string, perm: number): Promise<net.Server> {
    let stale = false;
    try {
      stale = lstatSync(path).isSocket();
      if (!stale) throw Object.assign(new Error('a file that is not a socket is in the way'), { code: 'EEXIST' });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    if (stale) {
      const alive = await new Promise<boolean>((resolve) => {
        const probe = net.connect(path);
        probe.once('connect', () => { probe.destroy(); resolve(true); });
        probe.once('error', () => resolve(false));
      });
      if (alive) throw Object.assign(new Error('address already in use'), { code: 'EADDRINUSE' });
      rmSync(path, { force: true });
      this.log.notice(`removed the stale unix socket ${path} (nothing was listening on it)`, { unixsocket: path });
    }
    const listener = await new Promise<net.Server>((resolve, reject) => {
      const l = net.createServer({ noDelay: true }, (socket) => this.accept(socket, path));
      l.once('error', reject);
      l.listen({ path, backlog: this.config.int('tcp-backlog') }, () => {
        l.off('error', reject);
        l.on('error', (e) => this.acceptFailed(e));
        resolve(l);
      });
    });
    if (perm !== 0) chmodSync(path, perm);
    process.on('exit', () => rmSync(path, { force: true }));
    return listener;
  }

  private listenTls(options: tls.TlsOptions, address: string, port: number): Promise<tls.Server> {
    return new Promise((resolve, reject) => {
      const listener = tls.createServer(options, (socket) => {
        this.tlsHandshakes.delete(peerKey(socket));
        if (tlsPeerRefused(this.config, socket)) {
          this.stats.rejectedConnections++;
          socket.on('error', () => {});
          socket.destroy();
          return;
        }
        this.accept(socket);
      });
      // A connection in handshake holds a descriptor as a client does: it counts toward maxclients,
      // and the periodic task closes it after tls-handshake-timeout.
      listener.on('connection', (raw: net.Socket) => {
        if (this.server.shuttingDown || this.server.clients.size + this.tlsHandshakes.size >= this.config.int('maxclients')) {
          this.stats.totalConnections++;
          this.stats.rejectedConnections++;
          raw.on('error', () => {});
          raw.destroy();
          return;
        }
        const key = peerKey(raw);
        this.tlsHandshakes.set(key, { socket: raw, sinceMs: Date.now() });
        raw.once('close', () => {
          if (this.tlsHandshakes.get(key)?.socket === raw) this.tlsHandshakes.delete(key);
        });
      });
      // Failed handshakes (no certificate, a wrong CA, plain text on the TLS port, Node's handshake
      // timer) end that socket only. With a listener for this event Node leaves the socket open:
      // it must be destroyed here.
      listener.on('tlsClientError', (e: NodeJS.ErrnoException, socket: tls.TLSSocket) => {
        // Counted once: by Node's timer here, or by expireTlsHandshakes, whichever comes first.
        if (this.tlsHandshakes.delete(peerKey(socket)) && e.code === 'ERR_TLS_HANDSHAKE_TIMEOUT') this.stats.tlsHandshakeTimeouts++;
        this.log.verbose(`TLS handshake failed: ${e.message}`);
        socket.destroy();
      });
      listener.once('error', reject);
      listener.listen({ host: address, port, ipv6Only: address.includes(':') }, () => {
        listener.off('error', reject);
        listener.on('error', (e) => this.acceptFailed(e));
        resolve(listener);
      });
    });
  }

  /**
   * An error on a listener: accept() failing (EMFILE/ENFILE when descriptors run out, ECONNABORTED).
   * libuv goes on listening; the failure is counted (INFO accept_errors) and logged, at most once a second.
   */
  acceptFailed(e: NodeJS.ErrnoException): void {
    this.stats.acceptErrors++;
    this.tasks.warnLimited('accept', `Error accepting a client connection: ${errorText(e)}`, { error: errorText(e) });
  }

  /** TLS connections accepted whose handshake is not done (INFO clients; they count toward maxclients). */
  get tlsHandshakesInProgress(): number {
    return this.tlsHandshakes.size;
  }

  /** Closes TLS connections whose handshake has taken longer than tls-handshake-timeout (counted in INFO). */
  expireTlsHandshakes(nowMs: number): void {
    if (this.tlsHandshakes.size === 0) return;
    const timeoutMs = this.config.int('tls-handshake-timeout');
    for (const [key, h] of this.tlsHandshakes) {
      if (nowMs - h.sinceMs < timeoutMs) continue;
      this.tlsHandshakes.delete(key);
      this.stats.tlsHandshakeTimeouts++;
      h.socket.destroy();
    }
  }

  /** A new connection; `unixPath` for one on the unix socket (always local for protected mode, as in Redis). */
  private accept(socket: net.Socket, unixPath?: string): void {
    if (this.server.shuttingDown) {
      socket.destroy();
      return;
    }
    this.stats.totalConnections++;
    if (this.server.clients.size + this.tlsHandshakes.size >= this.config.int('maxclients')) {
      this.refuse(socket, '-ERR max number of clients reached\r\n');
      return;
    }
    if (unixPath === undefined && this.deniedByProtectedMode(socket)) {
      this.refuse(socket, PROTECTED_MODE_MESSAGE);
      return;
    }
    const keepalive = this.config.int('tcp-keepalive');
    if (keepalive > 0 && unixPath === undefined) socket.setKeepAlive(true, keepalive * 1000);
    this.server.addClient(socket, unixPath);
  }

  /** Writes `message` to a connection that is not let in, then closes it completely (see REFUSED_CLOSE_MS). */
  private refuse(socket: net.Socket, message: string): void {
    this.stats.rejectedConnections++;
    socket.on('error', () => {});
    socket.write(message);
    socket.destroySoon();
    if (!socket.destroyed) this.tasks.after('refused connection close', REFUSED_CLOSE_MS, () => socket.destroy());
  }

  /** Protected mode: no password and listening beyond loopback → only loopback clients. */
  private deniedByProtectedMode(socket: net.Socket): boolean {
    if (!this.config.bool('protected-mode') || this.server.authRequired) return false;
    return !isLoopback(socket.remoteAddress ?? '');
  }
}

export const PROTECTED_MODE_MESSAGE =
  '-DENIED cellgate is running in protected mode because protected mode is enabled and no password is set for the default user. ' +
  'In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to ' +
  'cellgate you may adopt one of the following solutions: 1) Disable protected mode by sending the command ' +
  "'CONFIG SET protected-mode no' from the loopback interface by connecting to cellgate from the same host the server is running, " +
  'however MAKE SURE cellgate is not publicly accessible from internet if you do so. 2) Alternatively you can just disable the ' +
  "protected mode by editing the cellgate configuration file, setting the protected mode option to 'no', and then restarting " +
  'the server. 3) If you started the server manually just for testing, restart it with the \'--protected-mode no\' option. ' +
  '4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for ' +
  'the server to start accepting connections from the outside.\r\n';

/** A connection's peer, the same for a TLS socket and the TCP socket under it. */
function peerKey(socket: net.Socket): string {
  return `${socket.remoteAddress}|${socket.remotePort}`;
}

function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}
