/**
 * The server: listening sockets, the client registry, command dispatch (lookup, arity, auth gate,
 * stats) and the periodic task (active expiry, idle timeouts, metrics), all on one thread, as Redis.
 */
import { ArgumentTooLongError, type CommandArgs } from '../protocol/command-args.js';
import net from 'node:net';
import { chmodSync, lstatSync, rmSync } from 'node:fs';
import tls from 'node:tls';
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import { Clock } from '../clock.js';
import type { Config, OutputLimit } from '../config.js';
import type { Logger } from '../log.js';
import { Keyspace } from '../keyspace/keyspace.js';
import { ReplyWriter } from '../protocol/reply-writer.js';
import { allCommands, commandCatalog, lookupCommand, lookupSubcommand } from '../commands/table.js';
import { Acl, aclCheck, type User, ACL_DENIED_CMD, ACL_LOG_TEXT_BYTES, ACL_OK, deniedKeyIndex, noPermMessage } from '../acl/users.js';
import { loggedArg } from '../log-text.js';
import { aclClientInfo } from '../commands/acl.js';
import type { CommandContext, CommandServer, CommandSpec } from '../commands/types.js';
import { AppendOnly } from '../persistence/journal.js';
import { Snapshotter, type SaveMode } from '../persistence/snapshotter.js';
import { Client } from './client.js';
import { ClientsMemory } from './client-memory.js';
import { WATCH_FREE_CHECK_KEYS, WATCH_FREE_SLICE_KEYS, WATCH_FREE_SLICE_MS, watchBytes, type Watching } from './transaction.js';
import { METRICS_MAX_CONNECTIONS, startMetrics } from './metrics.js';
import { SlowLog } from './slowlog.js';
import { MemoryGuard, OOM_MESSAGE } from './memory.js';
import { Stats, recordDuration, type CommandStat } from './stats.js';
import { createTlsServer, tlsPeerRefused } from './tls.js';
import { errorText, Tasks } from './tasks.js';
import { DescriptorBudget } from './fd-limit.js';
import { runsInMulti } from '../commands/transactions.js';
import { parseBackendUrl } from '../backend/backend-url.js';
import { RedisBackend, type UnavailablePolicy } from '../backend/redis-backend.js';
import { LIMITER_SCRIPT, TYPE_SCRIPT } from '../backend/limiter-script.js';
import { BackendLimiterStore } from '../backend/backend-limiter.js';
import { BackendKeyStore } from '../backend/backend-keys.js';
import { LocalLimiterStore } from '../store/local-limiter.js';
import type { LimiterStore } from '../store/store.js';
import { LocalKeyStore } from '../store/local-keys.js';
import { PolicyLimiterStore } from '../store/policy-limiter.js';

/** The reply to a command queued in MULTI. */
const QUEUED_REPLY = Buffer.from('+QUEUED\r\n');

/**
 * Time budget of one active-expiry step. Short, because every client with a request in flight waits
 * for it: 2 ms steps put the p99 of a pipelined CL.THROTTLE load with expiring keys at 3–3.4 ms,
 * 0.5 ms steps at 2–2.3 ms (same reclaim rate: more steps per tick).
 */
const EXPIRE_CYCLE_MAX_MS = 0.5;
/** Slots one active-expiry step examines at most (~0.2 ms when none has expired). */
const EXPIRE_STEP_SLOTS = 65536;
/**
 * While steps find more than 10% of the keys they examine expired (Redis's
 * ACTIVE_EXPIRE_CYCLE_ACCEPTABLE_STALE), more steps follow between I/O turns, up to this many per
 * periodic tick: at hz 10, 48 × 0.5 ms is a quarter of the time, Redis's bound for its slow expiry
 * cycle. A million keys expiring together are then reclaimed in seconds, not minutes, and no client
 * ever waits more than one 0.5 ms step. Under a steady trickle of expiring keys one step per tick is
 * enough (lookups remove the expired keys they meet); sweeping again and again for the few found each
 * time took a tenth of the CPU at 100k busy keys.
 */
const EXPIRE_STEPS_PER_TICK = 48;
/**
 * A refused connection (maxclients, protected mode) gets its one-line error, then is closed for good
 * (not half-closed: a peer that never closes its side would keep the descriptor); if the line cannot
 * be written within this bound, the socket is destroyed anyway.
 */
const REFUSED_CLOSE_MS = 1000;

export class Server implements CommandServer {
  readonly clock = new Clock();
  readonly keyspace = new Keyspace();
  /** Snapshots: load, SAVE/BGSAVE, the save policy, MISCONF (src/persistence). */
  readonly snapshots: Snapshotter = new Snapshotter(this);
  /** The append-only journal (`appendonly yes`; src/persistence/journal.ts). */
  readonly journal: AppendOnly = new AppendOnly(this);
  readonly stats = new Stats();
  /** ACL users (src/acl/users.ts); the default user has requirepass as its password. */
  readonly acl = new Acl(allCommands());
  readonly writer = new ReplyWriter();
  /** Writes replies that come after a backend call (Client.defer), outside any batch. */
  readonly asyncWriter = new ReplyWriter();
  /** The shared backend (`backend`), or null: limiter state in `keyspace`. */
  backend: RedisBackend | null = null;
  /** Where the commands' limiter calls and key operations go (src/store/store.ts): picked at start. */
  private readonly localLimiter = new LocalLimiterStore(this.keyspace, this.stats);
  private readonly localKeys = new LocalKeyStore(this.keyspace, this.stats);
  readonly clients = new Map<number, Client>();
  /** The clients' memory accounts and their sum, checked against maxmemory-clients (client-memory.ts). */
  readonly clientsMemory = new ClientsMemory(() => this.clients.values());
  /** Watch sets of clients that ended them, still to leave the keyspace's watch index (releaseWatches). */
  private readonly watchesToFree: { watching: Watching; client: Client }[] = [];
  /** Position in watchesToFree[0].keys of the next watch to free. */
  private watchFreeAt = 0;
  /** Watches in watchesToFree not freed yet (INFO lazyfree_pending_watches). */
  pendingWatchFrees = 0;
  /** Slices run to free watches (INFO lazyfree_watch_slices), and the longest one (µs). */
  watchFreeSlices = 0;
  watchFreeSliceMaxUs = 0;
  readonly runId = randomBytes(20).toString('hex');
  readonly startedMs = Date.now();
  /** maxmemory and eviction (src/server/memory.ts). */
  readonly memory: MemoryGuard;
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
  /** `maxmemory`, kept as a number: execute() reads it for every command. */
  private maxmemoryBytes = 0;
  /** `client-query-buffer-limit`, kept as a number: every command queued in MULTI is checked against it. */
  private queryBufferLimit = 1024 * 1024 * 1024;
  /** `client-output-buffer-limit normal`, parsed once per change: clients read it for every batch. */
  outputLimit: OutputLimit = { hardBytes: 0, softBytes: 0, softSeconds: 0 };
  private nextClientId = 1;
  readonly slowlog = new SlowLog();
  /** slowlog-log-slower-than and slowlog-max-len, read once per CONFIG change. */
  private slowlogThresholdUs = 10000;
  private slowlogMaxLen = 128;
  private lastName: Buffer = Buffer.alloc(0);
  private lastSpec: CommandSpec | undefined;
  /** The counters of lastStatSpec, valid while stats.generation is lastStatGeneration. */
  private lastStatSpec: CommandSpec | undefined;
  private lastStat: CommandStat | undefined;
  private lastStatGeneration = -1;
  /**
   * The context handed to every command, refilled per call rather than allocated: handlers finish
   * before execute() returns and keep no reference to it.
   */
  private readonly ctx: CommandContext;
  private perfMark = performance.now();
  /** Active expiry steps run since the last periodic tick. */
  private expireSteps = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Periodic task runs since start (INFO stats periodic_task_runs: proof that it goes on). */
  periodicRuns = 0;
  private shuttingDown = false;
  /** Every timer and deferred callback runs through this (an exception is logged and counted, never fatal). */
  readonly tasks: Tasks;
  private readonly flushTask: () => void;
  private readonly expireTask: () => void;
  /** The descriptor limit and reserve that cap maxclients (measured in start()). */
  private fdBudget = new DescriptorBudget(null, 0);
  /**
   * TLS connections whose handshake is not done yet, by peer address: they hold a descriptor, so
   * they count toward maxclients, and one that takes longer than `tls-handshake-timeout` is closed.
   */
  private readonly tlsHandshakes = new Map<string, { socket: net.Socket; sinceMs: number }>();

  constructor(
    readonly config: Config,
    readonly log: Logger,
  ) {
    this.memory = new MemoryGuard(config, this.keyspace);
    this.ctx = { server: this, commands: commandCatalog, client: null as unknown as Client, reply: this.writer, nowUs: 0, nowMs: 0, limiter: this.localLimiter, keys: this.localKeys };
    this.tasks = new Tasks(log);
    this.flushTask = this.tasks.guard('reply flush', this.flushPending);
    this.expireTask = this.tasks.guard('active expiry', () => this.expireCycle());
  }

  /** The limiter store the commands decide through (picked at start); the rate limit service (src/rls) uses it too. */
  get limiterStore(): LimiterStore {
    return this.ctx.limiter;
  }

  private commandStat(spec: CommandSpec, fullName: string): CommandStat {
    if (spec === this.lastStatSpec && this.lastStatGeneration === this.stats.generation) return this.lastStat!;
    const stat = this.stats.command(fullName);
    this.lastStatSpec = spec;
    this.lastStat = stat;
    this.lastStatGeneration = this.stats.generation;
    return stat;
  }

  get authRequired(): boolean {
    // Clients start authenticated as `default` only while it is on and nopass, as Redis.
    const d = this.acl.defaultUser;
    return !(d.enabled && d.nopass);
  }

  /**
   * Binds every configured address on one port (and on `tls-port` with TLS). Rejects with a one-line
   * reason: a port in use, a missing certificate, an unreadable requirepass-file.
   */
  async start(): Promise<void> {
    this.config.loadSecrets();
    this.startBackend();
    // requirepass first, then the ACL file, whose default user (if any) wins, as in Redis.
    this.acl.syncRequirepass(this.config.get('requirepass'));
    const aclfile = this.config.get('aclfile');
    if (aclfile !== '') this.loadAclFile(aclfile, null);
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
        this.listeners.push(...(await startMetrics(this, metricsAddresses, metricsPort)));
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
    this.outputLimit = this.config.outputLimit('normal');
    this.config.set('port', String(port)); // with --port 0, CONFIG GET port tells the port chosen
    this.capMaxclients(metricsPort > 0 ? METRICS_MAX_CONNECTIONS : 0);
    this.applyRuntimeConfig();
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

  /**
   * Why CONFIG SET may not set `name` to `value`, or null. maxclients beyond the descriptor limit is
   * refused with Redis's text (its updateMaxclients), and the old value stays.
   */
  configRefusal(name: string, value: string): string | null {
    if (name === 'appendonly' && value === 'yes' && this.config.get('backend') !== '') return APPENDONLY_WITH_BACKEND;
    if (name === 'maxmemory') return this.memory.refusal(Number(value));
    if (name !== 'maxclients') return null;
    const requested = Number(value);
    const allowed = this.fdBudget.maxClients(requested);
    return allowed < requested ? `The operating system is not able to handle the specified number of clients, try with ${allowed}` : null;
  }

  /** Connects to the `backend` if one is set (the connection comes up in the background). */
  private startBackend(): void {
    const url = this.config.get('backend');
    if (url === '') return;
    const target = parseBackendUrl(url);
    this.backend = new RedisBackend(target, this.config.get('backend-prefix'), this.config.int('backend-timeout'),
      this.config.get('backend-unavailable') as UnavailablePolicy, LIMITER_SCRIPT, TYPE_SCRIPT, { log: this.log, after: (name, ms, task) => this.tasks.after(name, ms, task) });
    const limiter = new BackendLimiterStore(this.backend, new PolicyLimiterStore(this.localLimiter, this.stats, this.backend), this.stats, this.clock);
    this.ctx.limiter = limiter;
    this.ctx.keys = new BackendKeyStore(this.backend, this.localKeys, limiter, this.stats, this.clock);
    this.log.notice(`limiter state on the backend ${target.display} (${target.mode}, prefix '${this.config.get('backend-prefix')}', timeout ${this.config.int('backend-timeout')} ms, backend-unavailable ${this.config.get('backend-unavailable')})`, { backend: target.display });
  }

  /**
   * Replaces the ACL users with the file's (all or nothing: a bad file throws AclRuleError); clients
   * of users that were replaced are closed. At start and on ACL LOAD.
   */
  loadAclFile(path: string, caller: Client | null): void {
    const loaded = this.acl.parseFile(path);
    const gone = this.acl.replaceUsers(loaded);
    this.disconnectUsers(gone, caller);
  }

  /** Closes every connection authenticated as one of `users`: the caller's after this reply, as Redis frees them. */
  disconnectUsers(users: Set<User>, caller: Client | null): void {
    if (users.size === 0) return;
    for (const c of [...this.clients.values()]) {
      if (!users.has(c.user)) continue;
      if (c === caller) c.closing = true;
      else c.kill();
    }
  }

  /** Applies settings that CONFIG SET can change while running (logging, task frequency). */
  applyRuntimeConfig(): void {
    if (this.backend !== null) {
      this.backend.timeoutMs = this.config.int('backend-timeout');
      this.backend.policy = this.config.get('backend-unavailable') as UnavailablePolicy;
    }
    this.acl.syncRequirepass(this.config.get('requirepass'));
    this.log.level = this.config.get('loglevel');
    this.writer.onError = this.log.enabled('debug') ? this.logErrorReply : null;
    this.log.format = this.config.get('log-format') as 'human' | 'json';
    this.snapshots.refreshDenyWrites();
    this.journal.applyConfig();
    this.maxmemoryBytes = this.config.int('maxmemory');
    this.clientsMemory.limitBytes = clientsMemoryLimit(this.config.get('maxmemory-clients'), this.maxmemoryBytes);
    this.clientsMemory.enforce();
    this.queryBufferLimit = this.config.int('client-query-buffer-limit');
    this.outputLimit = this.config.outputLimit('normal');
    this.slowlogThresholdUs = this.config.int('slowlog-log-slower-than');
    this.slowlogMaxLen = this.config.int('slowlog-max-len');
    if (this.timer) clearInterval(this.timer);
    this.timer = this.tasks.every('periodic task', Math.max(1, Math.floor(1000 / this.config.int('hz'))), () => this.periodic());
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
        if (this.shuttingDown || this.clients.size + this.tlsHandshakes.size >= this.config.int('maxclients')) {
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
  private expireTlsHandshakes(nowMs: number): void {
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
    if (this.shuttingDown) {
      socket.destroy();
      return;
    }
    this.stats.totalConnections++;
    if (this.clients.size + this.tlsHandshakes.size >= this.config.int('maxclients')) {
      this.refuse(socket, '-ERR max number of clients reached\r\n');
      return;
    }
    if (unixPath === undefined && this.deniedByProtectedMode(socket)) {
      this.refuse(socket, PROTECTED_MODE_MESSAGE);
      return;
    }
    const keepalive = this.config.int('tcp-keepalive');
    if (keepalive > 0 && unixPath === undefined) socket.setKeepAlive(true, keepalive * 1000);
    const client = new Client(this.nextClientId++, socket, this, unixPath);
    this.clients.set(client.id, client);
    this.clientsMemory.join(client);
    // Redis's verbose lines: "Accepted 127.0.0.1:50312" / "Accepted connection to /tmp/x.sock".
    if (this.log.enabled('verbose')) {
      this.log.verbose(unixPath !== undefined ? `Accepted connection to ${unixPath}` : `Accepted ${client.addr}`, { id: client.id, addr: client.addr });
    }
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
    if (!this.config.bool('protected-mode') || this.authRequired) return false;
    return !isLoopback(socket.remoteAddress ?? '');
  }

  removeClient(client: Client): void {
    this.clientsMemory.release(client);
    // Redis logs "Client closed connection id=... addr=..." at verbose when a client goes away.
    if (this.clients.delete(client.id) && this.log.enabled('verbose')) {
      this.log.verbose(`Client closed connection id=${client.id} addr=${client.addr}`, { id: client.id, addr: client.addr, laddr: client.laddr });
    }
  }

  /** CONFIG RESETSTAT: the stats, and the counters kept beside them (Redis's resetServerStats). */
  resetStats(): void {
    this.stats.reset();
    this.clientsMemory.evictions = 0;
    this.watchFreeSlices = 0;
    this.watchFreeSliceMaxUs = 0;
  }

  /**
   * Ends a client's watch set. A small one leaves the keyspace's watch index now; a big one (a client
   * may watch up to MAX_WATCHED_KEYS) in slices of at most WATCH_FREE_SLICE_KEYS and WATCH_FREE_SLICE_MS,
   * one per event-loop turn, so
   * other clients are served between slices instead of waiting for millions of index removals. The set
   * is detached from its client first: whatever touches its keys meanwhile marks nobody that matters.
   * Until they are freed, the watches stay in their client's memory account and count toward its
   * WATCH cap (Client.watchesFreeing): a client cannot outrun the slices by watching and unwatching.
   */
  releaseWatches(w: Watching, client: Client): void {
    if (w.keys.length <= WATCH_FREE_SLICE_KEYS && this.watchesToFree.length === 0) {
      this.keyspace.unwatch(w.keys);
      return;
    }
    this.watchesToFree.push({ watching: w, client });
    client.watchesFreeing += w.keys.length;
    client.watchesFreeingBytes += w.bytes;
    this.pendingWatchFrees += w.keys.length;
    if (this.watchesToFree.length === 1) this.tasks.soon('watch free', this.freeWatchSlice);
  }

  private readonly freeWatchSlice = (): void => {
    this.watchFreeSlices++;
    const started = performance.now();
    let budget = WATCH_FREE_SLICE_KEYS;
    const ks = this.keyspace;
    // At most WATCH_FREE_SLICE_KEYS, and WATCH_FREE_SLICE_MS (checked every WATCH_FREE_CHECK_KEYS):
    // on a busy machine 8,192 index removals can take far longer than their usual ~2 ms.
    const deadline = started + WATCH_FREE_SLICE_MS;
    while (budget > 0 && this.watchesToFree.length > 0 && performance.now() < deadline) {
      const { watching, client } = this.watchesToFree[0];
      const keys = watching.keys;
      const end = Math.min(keys.length, this.watchFreeAt + Math.min(budget, WATCH_FREE_CHECK_KEYS));
      let bytes = 0;
      for (let i = this.watchFreeAt; i < end; i++) {
        ks.unwatchOne(keys[i]);
        bytes += watchBytes(keys[i].key);
      }
      const freed = end - this.watchFreeAt;
      budget -= freed;
      this.pendingWatchFrees -= freed;
      client.watchesFreeing -= freed;
      client.watchesFreeingBytes -= bytes;
      client.accountWatches();
      if (end === keys.length) {
        this.watchesToFree.shift();
        this.watchFreeAt = 0;
      } else {
        this.watchFreeAt = end;
      }
    }
    this.watchFreeSliceMaxUs = Math.max(this.watchFreeSliceMaxUs, Math.round((performance.now() - started) * 1000));
    if (this.watchesToFree.length > 0) this.tasks.soon('watch free', this.freeWatchSlice);
  };

  /**
   * Marks the start of a batch of commands (one read from one client). Each command's duration for
   * commandstats runs from the end of the previous one, so one clock read per command serves both
   * its time snapshot and its duration.
   */
  beginBatch(client: Client): void {
    this.perfMark = performance.now();
    this.batchClient = client;
  }

  /** The client whose batch is running (beginBatch): error replies at loglevel debug name it. */
  private batchClient: Client | null = null;

  /** loglevel debug: each error reply, with its client (ReplyWriter.onError, null at other levels). */
  private readonly logErrorReply = (text: string): void => {
    const c = this.batchClient;
    this.log.debug(`error reply to client id=${c?.id ?? '?'} addr=${c?.addr ?? '?'}: ${text}`, { id: c?.id, addr: c?.addr, error: text });
  };

  /** The command named by argument 0, remembering the last one: a pipeline mostly repeats one command. */
  private findCommand(argv: CommandArgs): CommandSpec | undefined {
    if (argv.bytesEqual(0, this.lastName)) return this.lastSpec;
    const spec = lookupCommand(argv.lower(0));
    if (spec !== undefined) {
      this.lastName = Buffer.from(argv.buffer(0));
      this.lastSpec = spec;
    }
    return spec;
  }

  /**
   * Clients whose replies wait for the end of this event-loop turn's reads. Like Redis (which writes
   * in beforeSleep, after serving every readable client), replies go out after all the requests that
   * arrived together have run, not one socket write right after each read: a write to a client that
   * sleeps waiting for it costs a wake-up, and the writes bunched at the end of a turn find it awake.
   * Pipelined CL.THROTTLE over 100k keys went from ~515k to ~740k requests/s with this, and the
   * median latency from 1.5 to 0.95 ms (setImmediate callbacks run right after the poll phase).
   */
  private toFlush: Client[] = [];

  /** Sends the replies waiting for the end of this turn (then, or before background work that may take a while). */
  readonly flushPending = (): void => {
    // Group commit: this turn's journal records are written (and with appendfsync always synced)
    // before any of its replies leave.
    this.journal.commit();
    const clients = this.toFlush;
    if (clients.length === 0) return;
    this.toFlush = [];
    for (const c of clients) c.sendPending();
  };

  /** Sends `client`'s pending replies at the end of this turn (see toFlush). */
  flushLater(client: Client): void {
    if (this.toFlush.length === 0) setImmediate(this.flushTask);
    this.toFlush.push(client);
  }

  /** Runs one command for `client`; its reply goes to the shared writer. */
  execute(client: Client, argv: CommandArgs): void {
    const reply = this.writer;
    let spec = this.findCommand(argv);
    if (spec === undefined) {
      this.stats.error('ERR');
      reply.error(unknownCommandMessage(argv));
      return;
    }
    if (spec.subcommands !== undefined && argv.length >= 2) {
      const sub = lookupSubcommand(spec, argv.lower(1));
      if (sub === undefined) {
        this.stats.error('ERR');
        reply.error(`ERR unknown subcommand '${truncate(argv.text(1), 128)}'. Try ${spec.name.toUpperCase()} HELP.`);
        return;
      }
      spec = sub;
    }
    const fullName = spec.fullName ?? spec.name;
    const stat = this.commandStat(spec, fullName);
    const argc = argv.length;
    if ((spec.arity > 0 && argc !== spec.arity) || argc < -spec.arity || spec.run === undefined) {
      stat.rejectedCalls++;
      this.stats.error('ERR');
      // EXEC's own refusal carries the reason in EXECABORT form, in MULTI or not (Redis's execCommandAbort).
      reply.error(fullName === 'exec' ? EXEC_ARITY_ABORT : `ERR wrong number of arguments for '${fullName}' command`);
      return;
    }
    if (!client.authenticated && !spec.flags.includes('no-auth')) {
      stat.rejectedCalls++;
      this.stats.error('NOAUTH');
      reply.error('NOAUTH Authentication required.');
      return;
    }
    // ACL: one test for a user allowed everything (the default user); otherwise a byte per command
    // id, and the keys only when the user's key patterns are restricted.
    const user = client.user;
    if (!user.unrestricted) {
      const result = aclCheck(user, spec, argv, 0);
      if (result !== ACL_OK) {
        stat.rejectedCalls++;
        client.lastCommand = fullName; // the log's client-info names the refused command, as Redis's
        this.aclDenied(client, fullName, argv, result, 'toplevel');
        reply.error(noPermMessage(result, user, fullName));
        return;
      }
    }
    // While the snapshot loads, commands without the `loading` flag are refused (LOADING); with
    // stop-writes-on-bgsave-error, after a failed background save writes are refused until a save
    // succeeds (MISCONF). `gated` is false in normal operation, so this costs one test.
    if (this.snapshots.gated) {
      const refusal = this.snapshots.refusal(spec);
      if (refusal !== null) {
        stat.rejectedCalls++;
        this.stats.error(refusal.code);
        reply.error(refusal.message);
        return;
      }
    }
    // maxmemory, as Redis's processCommand: evict (bounded) before any command; a command that may
    // add memory (denyoom) is refused if memory stays over the limit and nothing can be evicted.
    // Nothing is evicted while the snapshot loads (a key evicted then would let a later duplicate of
    // it in the file pass), as Redis does not evict while loading.
    // In MULTI every command but EXEC/DISCARD/QUIT/RESET is refused then, as queuing takes memory
    // (Redis's reject_cmd_on_oom), and EXEC if it holds a denyoom command.
    if (this.maxmemoryBytes > 0 && !this.snapshots.loading && !this.memory.beforeCommand(this.maxmemoryBytes) &&
      (spec.flags.includes('denyoom') || (client.multi !== null && oomInMulti(client, spec)))) {
      stat.rejectedCalls++;
      this.stats.error('OOM');
      reply.error(OOM_MESSAGE);
      return;
    }
    // MULTI: a command is queued only here, after every refusal above (unknown command, arity,
    // NOAUTH, any permission check, LOADING/MISCONF, OOM), because Redis's processCommand queues
    // last, after all of its checks; a refusal while in MULTI marks the transaction
    // (executeInMulti). Two differences decide only which error a command refused for two reasons
    // gets: LOADING/MISCONF come before OOM here (Redis: OOM first), and `no-multi` is refused at
    // the queue step (Redis: right after NOAUTH), which keeps it off the path of clients not in
    // MULTI. One test for a client not in MULTI.
    if (client.multi !== null && this.transactionStep(client, spec, stat, argv)) return;
    const started = this.perfMark;
    const nowUs = this.clock.nowUsAt(started);
    const ctx = this.ctx;
    ctx.client = client;
    ctx.nowUs = nowUs;
    ctx.nowMs = Math.floor(nowUs / 1000);
    const mark = reply.length;
    client.lastCommand = fullName;
    reply.errorAt = -1;
    try {
      spec.run(ctx, argv);
    } catch (e) {
      this.commandFailed(fullName, e, mark);
    }
    const ended = performance.now();
    this.perfMark = ended;
    this.commandDone(client, spec, fullName, stat, argv, (ended - started) * 1000, nowUs, mark);
  }

  /**
   * Counts and logs an ACL refusal (`result` from aclCheck) of `client`'s command: the INFO
   * acl_access_denied_* counter, errorstats NOPERM, and an ACL LOG entry with `context` (toplevel,
   * or multi for a queued command refused at EXEC). The caller writes the error reply.
   */
  aclDenied(client: Client, fullName: string, argv: CommandArgs, result: number, context: 'toplevel' | 'multi'): void {
    this.stats.error('NOPERM');
    if (result === ACL_DENIED_CMD) this.stats.aclDeniedCmd++;
    else this.stats.aclDeniedKey++;
    const object = result === ACL_DENIED_CMD ? fullName : loggedArg(argv, deniedKeyIndex, ACL_LOG_TEXT_BYTES);
    this.acl.addLog(result === ACL_DENIED_CMD ? 'command' : 'key', context, object, client.user.name, aclClientInfo(client), Date.now());
  }

  /**
   * The bookkeeping after a command ran, directly or queued in EXEC: commandstats and the latency
   * histogram, the slow log, and the failed-call counters (a reply that is an error, as the writer
   * recorded it, counted as Redis's failed_calls / errorstats do).
   */
  private commandDone(client: Client, spec: CommandSpec, fullName: string, stat: CommandStat, argv: CommandArgs, durationUs: number, nowUs: number, mark: number): void {
    const reply = this.writer;
    stat.usec += durationUs;
    recordDuration(stat, durationUs);
    if (durationUs >= this.slowlogThresholdUs && this.slowlogThresholdUs >= 0 && !spec.flags.includes('skip_slowlog')) {
      this.slowlog.consider(this.slowlogThresholdUs, this.slowlogMaxLen, durationUs, argv, spec.secretArg, nowUs, client.addr, client.name);
    }
    stat.calls++;
    this.stats.totalCommands++;
    if (reply.errorAt === mark) {
      stat.failedCalls++;
      this.stats.error(reply.errorCodeAt(mark));
    }
  }

  /**
   * execute() for a client in MULTI: a command that does not reach the queue step (transactionStep)
   * was refused, which marks the transaction (EXEC then answers EXECABORT); a refused EXEC ends it
   * with its error in Redis's EXECABORT form (execCommandAbort).
   */
  executeInMulti(client: Client, argv: CommandArgs): void {
    const m = client.multi!;
    m.admitted = false;
    const mark = this.writer.length;
    this.execute(client, argv);
    if (m.admitted || client.multi !== m) return;
    m.flagged = true;
    if (lookupCommand(argv.lower(0)) === lookupCommand('exec') && this.writer.length > mark) {
      const error = this.writer.errorTextAt(mark);
      if (error.startsWith('EXECABORT ')) {
        client.discardTransaction();
        return;
      }
      this.writer.truncate(mark);
      client.discardTransaction();
      // Redis passes its own format-built messages without their `ERR ` (arity), shared ones whole (NOAUTH, OOM).
      this.writer.error(`EXECABORT Transaction discarded because of: ${error.startsWith('ERR ') ? error.slice(4) : error}`);
    }
  }

  /**
   * A command from a client in MULTI that passed every refusal: queued (+QUEUED) and true, or false
   * for the commands that run at once (EXEC, DISCARD, MULTI, WATCH, QUIT, RESET). `no-multi`
   * commands are refused (and mark the transaction). The queue counts toward the query buffer
   * limit: queued bytes plus pending input over client-query-buffer-limit closes the client, so a
   * MULTI that never ends cannot pin unbounded memory.
   */
  private transactionStep(client: Client, spec: CommandSpec, stat: CommandStat, argv: CommandArgs): boolean {
    const m = client.multi!;
    m.admitted = true;
    if (runsInMulti(spec)) return false;
    const fullName = spec.fullName ?? spec.name;
    client.lastCommand = fullName;
    if (spec.flags.includes('no-multi')) {
      m.flagged = true;
      stat.rejectedCalls++;
      this.stats.error('ERR');
      this.writer.error('ERR Command not allowed inside a transaction');
      return true;
    }
    this.clientsMemory.change(client, 'multi', m.push(spec, argv));
    if (client.closing) return true; // evicted: the queue grew the clients' memory over maxmemory-clients
    const held = m.bytes + client.parser.pendingBytes;
    if (held > this.queryBufferLimit) {
      client.closeForQueryBuffer(held);
      return true;
    }
    this.writer.constant(QUEUED_REPLY);
    return true;
  }

  /**
   * Runs one queued command inside EXEC: its reply goes to the shared writer (an element of EXEC's
   * array), counted in commandstats and errorstats as a command of its own, as Redis's call() from
   * execCommand. `nowUs` is EXEC's: one time snapshot for the whole transaction, as Redis's
   * cmd_time_snapshot is taken once for nested calls.
   */
  callQueued(client: Client, spec: CommandSpec, argv: CommandArgs, nowUs: number): void {
    const reply = this.writer;
    const fullName = spec.fullName ?? spec.name;
    const stat = this.commandStat(spec, fullName);
    const ctx = this.ctx;
    ctx.client = client;
    ctx.nowUs = nowUs;
    ctx.nowMs = Math.floor(nowUs / 1000);
    const mark = reply.length;
    // As in execute(): each queued command's duration runs from the end of the previous one (or
    // EXEC's start), one clock read per command.
    const started = this.perfMark;
    reply.errorAt = -1;
    try {
      spec.run!(ctx, argv);
    } catch (e) {
      this.commandFailed(fullName, e, mark);
    }
    const ended = performance.now();
    this.perfMark = ended;
    this.commandDone(client, spec, fullName, stat, argv, (ended - started) * 1000, nowUs, mark);
  }

  /**
   * A command handler threw: its partial reply is replaced by an error and the server goes on (an
   * exception from a socket's data handler would otherwise end the process). An argument too long
   * for a string is the client's doing; anything else is a bug, logged.
   */
  private commandFailed(fullName: string, e: unknown, mark: number): void {
    const reply = this.writer;
    reply.truncate(mark);
    if (e instanceof ArgumentTooLongError) {
      reply.error(`ERR argument of ${e.bytes} bytes is too long for '${fullName}'`);
      return;
    }
    this.tasks.warnLimited(`command ${fullName}`, `internal error in '${fullName}': ${errorText(e)}`, { command: fullName, error: errorText(e) });
    reply.error(`ERR internal error in '${fullName}'`);
  }

  /**
   * One step (≤ EXPIRE_CYCLE_MAX_MS) of the active expiry cycle; if more than 10% of what it examined
   * had expired, another step is queued behind pending I/O (setImmediate), up to
   * EXPIRE_STEPS_PER_TICK per tick.
   */
  private expireCycle(): void {
    // Not while the snapshot loads (as Redis): the loader finds duplicate keys by looking them up.
    if (this.shuttingDown || this.snapshots.loading) return;
    // Replies of this turn go out first: the step may take its whole 2 ms budget.
    this.flushPending();
    const deadline = performance.now() + EXPIRE_CYCLE_MAX_MS;
    const ks = this.keyspace;
    const removed = ks.expireStep(this.clock.nowMs(), EXPIRE_STEP_SLOTS, () => performance.now() > deadline);
    this.expireSteps++;
    const stale = removed * 10 > ks.lastStepKeys;
    if (removed > 0 && stale && this.expireSteps < EXPIRE_STEPS_PER_TICK) setImmediate(this.expireTask);
  }

  /**
   * The periodic task: active expiry, idle timeouts, metrics (Redis's serverCron). Each part runs
   * guarded: one that throws (process.memoryUsage() with no descriptor left, say) is logged and
   * counted, and the others still run.
   */
  private periodic(): void {
    this.periodicRuns++;
    const nowMs = this.clock.nowMs();
    this.expireSteps = 0;
    this.expireCycle();
    // Not while the snapshot loads: a key evicted then would let a later duplicate of it in the file pass.
    if (!this.snapshots.loading) this.runPart('memory check', () => this.memory.periodic());
    this.stats.sampleOps();
    this.runPart('snapshot cron', () => this.snapshots.cron(nowMs));
    this.runPart('journal cron', () => this.journal.cron(nowMs));
    this.clock.resync();
    const now = Date.now();
    this.expireTlsHandshakes(now);
    const timeoutSec = this.config.int('timeout');
    const cutoff = timeoutSec > 0 ? now - timeoutSec * 1000 : -Infinity;
    for (const client of this.clients.values()) {
      if (client.lastInteractionMs < cutoff) {
        this.log.verbose('closing idle client', { id: client.id, addr: client.addr });
        client.kill();
      } else if (client.checkSoftOutputLimit(now)) {
        // Sockets drain without a batch: the accounts follow here, as Redis's clientsCron.
        client.accountBuffers();
      }
    }
  }

  private runPart(name: string, part: () => void): void {
    try {
      part();
    } catch (e) {
      this.tasks.failed(name, e);
    }
  }

  /**
   * Saves the final snapshot (per `save`: SIGTERM/SIGINT and plain SHUTDOWN use `default`, which saves
   * when save points are configured), stops accepting, closes every client and exits: code 0, or 1
   * if the final save failed. With `refuseIfSaveFails` (SHUTDOWN without FORCE, as Redis) a failed
   * save cancels the shutdown instead and this returns false; a signal never cancels it (the old
   * snapshot stays, the failure is logged).
   */
  shutdown(reason: string, opts: { save?: SaveMode; refuseIfSaveFails?: boolean } = {}): boolean {
    if (this.shuttingDown) return true;
    this.log.notice(`shutting down: ${reason}`);
    const saved = this.snapshots.saveForShutdown(opts.save ?? 'default');
    if (!saved && opts.refuseIfSaveFails) {
      this.log.warning('Errors trying to shut down the server. Check the logs for more information.');
      return false;
    }
    if (!saved) this.log.warning('The final snapshot failed: exiting anyway (the previous snapshot is left as it was)');
    this.runPart('journal shutdown', () => this.journal.shutdown());
    const code = saved ? 0 : 1;
    this.shuttingDown = true;
    if (this.timer) clearInterval(this.timer);
    for (const l of this.listeners) l.close();
    this.flushPending(); // replies of this turn first, as they would have gone out before the close
    for (const c of this.clients.values()) c.socket.destroy();
    this.log.notice('cellgate is now ready to exit, bye bye...');
    process.exit(code);
  }
}

/** Why `appendonly yes` is refused with a `backend` (at start and by CONFIG SET). */
export const APPENDONLY_WITH_BACKEND = 'appendonly yes is not used with a backend: the limiter state lives on the backend (docs/backend.md), not in this process';

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

const EXEC_ARITY_ABORT = "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command";

/**
 * `maxmemory-clients` in bytes: a byte count, or a percentage of maxmemory (0 = off, and off for a
 * percentage while maxmemory is 0), as Redis's getClientEvictionLimit.
 */
function clientsMemoryLimit(value: string, maxmemoryBytes: number): number {
  if (value.endsWith('%')) return Math.floor((maxmemoryBytes * Number(value.slice(0, -1))) / 100);
  return Number(value);
}

/** Redis's reject_cmd_on_oom in MULTI: anything but EXEC/DISCARD/QUIT/RESET, and EXEC holding a denyoom command. */
function oomInMulti(client: Client, spec: CommandSpec): boolean {
  switch (spec.fullName ?? spec.name) {
    case 'exec':
      return client.multi!.commands.some((c) => c.spec.flags.includes('denyoom'));
    case 'discard':
    case 'quit':
    case 'reset':
      return false;
    default:
      return true;
  }
}

/** A connection's peer, the same for a TLS socket and the TCP socket under it. */
function peerKey(socket: net.Socket): string {
  return `${socket.remoteAddress}|${socket.remotePort}`;
}

function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}

/** Like C's `%.<n>s`: at most n chars, and nothing from a NUL byte on. */
function truncate(s: string, n: number): string {
  const nul = s.indexOf('\0');
  if (nul !== -1 && nul < n) n = nul;
  return s.length > n ? s.slice(0, n) : s;
}

/** Redis 7's text: `unknown command 'x', with args beginning with: 'a' 'b' ` (args up to 128 chars). */
function unknownCommandMessage(argv: CommandArgs): string {
  let args = '';
  for (let i = 1; i < argv.length && args.length < 128; i++) {
    args += `'${truncate(argv.text(i, 128 - args.length), 128 - args.length)}' `;
  }
  return `ERR unknown command '${truncate(argv.text(0), 128)}', with args beginning with: ${args}`;
}
