/**
 * The server: its parts (keyspace, persistence, ACL, backend, stats), the client registry, applying
 * the configuration, and its life from start to shutdown, all on one thread, as Redis. The
 * listening sockets and admission are src/server/listeners.ts, command dispatch dispatch.ts and
 * gates.ts, the periodic task cron.ts, a client's connection client.ts.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type net from 'node:net';
import type tls from 'node:tls';
import { randomBytes } from 'node:crypto';
import { Clock } from '../clock.js';
import type { Config, OutputLimit } from '../config.js';
import type { Logger } from '../log.js';
import { Keyspace } from '../keyspace/keyspace.js';
import { ReplyWriter } from '../protocol/reply-writer.js';
import { allCommands } from '../commands/table.js';
import { Acl, type User } from '../acl/users.js';
import type { CommandServer, CommandSpec, ConfigSetHook } from '../commands/types.js';
import { AppendOnly } from '../persistence/journal.js';
import { Snapshotter, type SaveMode } from '../persistence/snapshotter.js';
import { Client } from './client.js';
import { ClientsMemory, type AccountHolder } from './client-memory.js';
import type { Watching } from './transaction.js';
import { SlowLog } from './slowlog.js';
import { MemoryGuard } from './memory.js';
import { Stats } from './stats.js';
import { errorText, Tasks } from './tasks.js';
import { Dispatcher } from './dispatch.js';
import { Listeners } from './listeners.js';
import { Cron } from './cron.js';
import { DegradedModes } from './degraded.js';
import { WatchRelease } from './watch-release.js';
import { parseBackendUrl } from '../backend/backend-url.js';
import { RedisBackend, type UnavailablePolicy } from '../backend/redis-backend.js';
import { BackendTls, type BackendTlsFiles } from '../backend/backend-tls.js';
import { BLOCK_SCRIPT, LIMITER_SCRIPT, TYPE_SCRIPT } from '../backend/limiter-script.js';
import { BackendLimiterStore } from '../backend/backend-limiter.js';
import { BackendLeaseStore } from '../backend/backend-leases.js';
import { BackendKeyStore } from '../backend/backend-keys.js';
import { LocalLimiterStore } from '../store/local-limiter.js';
import { LocalLeaseStore } from '../store/local-leases.js';
import { LeaseWaiters } from './lease-waiters.js';
import type { LimiterStore } from '../store/store.js';
import { LocalKeyStore } from '../store/local-keys.js';
import { PolicyLimiterStore } from '../store/policy-limiter.js';

export { PROTECTED_MODE_MESSAGE } from './listeners.js';

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
  /** The backend connections' TLS files (backend-tls-*), watched; null without a backend. */
  backendTls: BackendTls | null = null;
  /** Where the commands' limiter calls and key operations go (src/store/store.ts): picked at start. */
  readonly localLimiter = new LocalLimiterStore(this.keyspace, this.stats);
  readonly localKeys = new LocalKeyStore(this.keyspace, this.stats);
  readonly localLeases = new LocalLeaseStore(this.keyspace, this.stats);
  readonly clients = new Map<number, Client>();
  /** The clients' memory accounts and their sum, checked against maxmemory-clients (client-memory.ts). */
  readonly clientsMemory = new ClientsMemory(() => this.accountHolders());
  /** Accounts of other doors' connections (the rate limit service's gRPC connections), in the same sum. */
  readonly otherAccounts = new Set<AccountHolder>();
  /** Other doors' word on CONFIG SET (src/commands/admin.ts). */
  readonly configHooks: ConfigSetHook[] = [];
  /** The clients waiting in RL.ACQUIRE ... WAIT, served through whichever lease store was picked at start. */
  readonly leaseWaiters = new LeaseWaiters(() => this.dispatcher.ctx.leases, this.clock, this.clientsMemory, this.stats, (e) =>
    this.tasks.warnLimited('lease waiters', `internal error serving waiting RL.ACQUIREs: ${errorText(e)}`, { error: errorText(e) }));
  readonly runId = randomBytes(20).toString('hex');
  readonly startedMs = Date.now();
  /** maxmemory and eviction (src/server/memory.ts). */
  readonly memory: MemoryGuard;
  /** `client-output-buffer-limit normal`, parsed once per change: clients read it for every batch. */
  outputLimit: OutputLimit = { hardBytes: 0, softBytes: 0, softSeconds: 0 };
  private nextClientId = 1;
  readonly slowlog = new SlowLog();
  /** Every timer and deferred callback runs through this (an exception is logged and counted, never fatal). */
  readonly tasks: Tasks;
  /** Finds, gates, queues and runs every command (src/server/dispatch.ts). */
  readonly dispatcher: Dispatcher;
  /** The listening sockets and who is let in (src/server/listeners.ts). */
  readonly listeners: Listeners;
  /** The periodic task (src/server/cron.ts). */
  private readonly cron: Cron;
  /** The degraded modes in force, shown in INFO, metrics, /readyz and the log (src/server/degraded.ts). */
  readonly degraded = new DegradedModes(this);
  /** Ended WATCH sets leaving the keyspace's watch index in slices (src/server/watch-release.ts). */
  private readonly watchRelease: WatchRelease;
  /** Set once shutdown() has begun: nothing new is accepted, the periodic task stops expiring. */
  shuttingDown = false;
  private readonly flushTask: () => void;

  constructor(
    readonly config: Config,
    readonly log: Logger,
  ) {
    this.memory = new MemoryGuard(config, this.keyspace);
    this.tasks = new Tasks(log);
    this.dispatcher = new Dispatcher(this);
    this.listeners = new Listeners(this);
    this.cron = new Cron(this);
    this.watchRelease = new WatchRelease(this.keyspace, this.tasks);
    this.flushTask = this.tasks.guard('reply flush', this.flushPending);
  }

  /** The limiter store the commands decide through (picked at start); the rate limit service (src/rls) uses it too. */
  get limiterStore(): LimiterStore {
    return this.dispatcher.ctx.limiter;
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
    await this.listeners.open();
    this.outputLimit = this.config.outputLimit('normal');
    this.config.set('port', String(this.port)); // with --port 0, CONFIG GET port tells the port chosen
    this.applyRuntimeConfig();
  }

  /** The port listened on (the one picked, with --port 0). */
  get port(): number {
    return this.listeners.port;
  }

  get tlsPort(): number {
    return this.listeners.tlsPort;
  }

  get rebinding(): boolean {
    return this.listeners.rebinding;
  }

  set rebinding(value: boolean) {
    this.listeners.rebinding = value;
  }

  /** CONFIG SET port/bind (Listeners.rebind). */
  rebind(bind: string, port: number): Promise<string | null> {
    return this.listeners.rebind(bind, port);
  }

  /** CONFIG SET of the TLS files (Listeners.reloadTls). */
  reloadTls(context: tls.TlsOptions): void {
    this.listeners.reloadTls(context);
  }

  get tlsActive(): boolean {
    return this.listeners.tlsActive;
  }

  get tlsHandshakesInProgress(): number {
    return this.listeners.tlsHandshakesInProgress;
  }

  /** An error on a listener (Listeners.acceptFailed; the metrics port's too). */
  acceptFailed(e: NodeJS.ErrnoException): void {
    this.listeners.acceptFailed(e);
  }

  get periodicRuns(): number {
    return this.cron.runs;
  }

  /**
   * Why CONFIG SET may not set `name` to `value`, or null. maxclients beyond the descriptor limit is
   * refused with Redis's text (its updateMaxclients), and the old value stays.
   */
  configRefusal(name: string, value: string): string | null {
    if (name === 'appendonly' && value === 'yes' && this.config.get('backend') !== '') return APPENDONLY_WITH_BACKEND;
    if (name === 'maxmemory') return this.memory.refusal(Number(value));
    if (name !== 'maxclients') return null;
    return this.listeners.maxclientsRefusal(Number(value));
  }

  /** Connects to the `backend` if one is set (the connection comes up in the background). */
  private startBackend(): void {
    const url = this.config.get('backend');
    if (url === '') return;
    const target = parseBackendUrl(url);
    // A file that cannot be read, or a broken set, refuses the start (as a bad URL does).
    const backendTls = new BackendTls(this.backendTlsFiles(), { warning: (m) => this.log.warning(m), notice: (m) => this.log.notice(m) });
    this.backendTls = backendTls;
    if (target.tls) void backendTls.watch().catch((e: Error) => this.log.warning(`backend-tls: cannot watch the files: ${e.message}`));
    else if (backendTls.configured) this.log.warning(`backend-tls-* files are set but the backend ${target.display} is not reached over TLS (rediss:// or rediss-cluster://): they are not used`);
    this.backend = new RedisBackend(target, this.config.get('backend-prefix'), this.config.int('backend-timeout'),
      this.config.get('backend-unavailable') as UnavailablePolicy, LIMITER_SCRIPT, TYPE_SCRIPT, BLOCK_SCRIPT, { log: this.log, after: (name, ms, task) => this.tasks.after(name, ms, task) },
      { sentinelUsername: this.config.get('backend-sentinel-username'), sentinelPassword: this.config.get('backend-sentinel-password'), tls: backendTls.options });
    this.backend.tls = backendTls;
    const limiter = new BackendLimiterStore(this.backend, new PolicyLimiterStore(this.localLimiter, this.stats, this.backend), this.stats, this.clock);
    this.dispatcher.ctx.limiter = limiter;
    this.dispatcher.ctx.keys = new BackendKeyStore(this.backend, this.localKeys, limiter, this.stats, this.clock);
    this.dispatcher.ctx.leases = new BackendLeaseStore(this.backend, limiter, this.localLeases, this.stats, this.clock);
    this.log.notice(`limiter state on the backend ${target.display} (${target.mode}, prefix '${this.config.get('backend-prefix')}', timeout ${this.config.int('backend-timeout')} ms, backend-unavailable ${this.config.get('backend-unavailable')})`, { backend: target.display });
  }

  private backendTlsFiles(): BackendTlsFiles {
    return { certFile: this.config.get('backend-tls-cert-file'), keyFile: this.config.get('backend-tls-key-file'), caFile: this.config.get('backend-tls-ca-cert-file') };
  }

  /**
   * Replaces the ACL users with the file's (all or nothing: a bad file throws AclRuleError); clients
   * of users that were replaced are closed. At start and on ACL LOAD.
   */
  loadAclFile(path: string, caller: Client | null): void {
    this.replaceAclUsers(this.acl.parseFile(path), caller);
  }

  /** The same, from the file's text read already (ACL LOAD reads it off the event loop). */
  loadAclText(path: string, text: string, caller: Client | null): void {
    this.replaceAclUsers(this.acl.parseText(path, text), caller);
  }

  private replaceAclUsers(loaded: Map<string, User>, caller: Client | null): void {
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
      // CONFIG SET of a backend-tls-* file (or any setting): the files are read again, off the loop.
      if (this.backend.target.tls) this.backendTls?.setFiles(this.backendTlsFiles());
    }
    this.acl.syncRequirepass(this.config.get('requirepass'));
    this.log.level = this.config.get('loglevel');
    this.log.format = this.config.get('log-format') as 'human' | 'json';
    this.snapshots.refreshDenyWrites();
    this.journal.applyConfig();
    this.dispatcher.applyConfig(this.config);
    this.clientsMemory.limitBytes = clientsMemoryLimit(this.config.get('maxmemory-clients'), this.config.int('maxmemory'));
    this.clientsMemory.enforce();
    this.outputLimit = this.config.outputLimit('normal');
    this.cron.schedule(this.config.int('hz'));
  }

  /** A connection Listeners let in becomes a client. */
  addClient(socket: net.Socket, unixPath: string | undefined): void {
    const client = new Client(this.nextClientId++, socket, this, unixPath);
    this.clients.set(client.id, client);
    this.clientsMemory.join(client);
    // Redis's verbose lines: "Accepted 127.0.0.1:50312" / "Accepted connection to /tmp/x.sock".
    if (this.log.enabled('verbose')) {
      this.log.verbose(unixPath !== undefined ? `Accepted connection to ${unixPath}` : `Accepted ${client.addr}`, { id: client.id, addr: client.addr });
    }
  }

  removeClient(client: Client): void {
    this.leaseWaiters.clientGone(client);
    this.clientsMemory.release(client);
    // Redis logs "Client closed connection id=... addr=..." at verbose when a client goes away.
    if (this.clients.delete(client.id) && this.log.enabled('verbose')) {
      this.log.verbose(`Client closed connection id=${client.id} addr=${client.addr}`, { id: client.id, addr: client.addr, laddr: client.laddr });
    }
  }

  /** Every memory account: the RESP clients', then the other doors'. */
  private *accountHolders(): Iterable<AccountHolder> {
    yield* this.clients.values();
    yield* this.otherAccounts;
  }

  /** CONFIG RESETSTAT: the stats, and the counters kept beside them (Redis's resetServerStats). */
  resetStats(): void {
    this.stats.reset();
    this.clientsMemory.evictions = 0;
    this.watchRelease.resetStats();
  }

  /** Ends a client's watch set (WatchRelease.release: big ones in slices). */
  releaseWatches(w: Watching, client: Client): void {
    this.watchRelease.release(w, client);
  }

  /** Watches of ended sets not freed yet (INFO lazyfree_pending_watches). */
  get pendingWatchFrees(): number {
    return this.watchRelease.pending;
  }

  /** Slices run to free watches (INFO lazyfree_watch_slices), and the longest one (µs). */
  get watchFreeSlices(): number {
    return this.watchRelease.slices;
  }

  get watchFreeSliceMaxUs(): number {
    return this.watchRelease.sliceMaxUs;
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

  /** QueuedDispatch (EXEC): an ACL refusal of a queued command, counted (errorstats NOPERM) and logged. */
  aclDenied(client: Client, fullName: string, argv: CommandArgs, result: number, context: 'toplevel' | 'multi'): void {
    this.stats.error('NOPERM');
    this.dispatcher.logAclDenial(client, fullName, argv, result, context);
  }

  /** QueuedDispatch (EXEC): runs one queued command (Dispatcher.callQueued). */
  callQueued(client: Client, spec: CommandSpec, argv: CommandArgs, nowUs: number): void {
    this.dispatcher.callQueued(client, spec, argv, nowUs);
  }

  /** Runs one part of the periodic task or of the shutdown: an exception is logged and counted, and the rest goes on. */
  runPart(name: string, part: () => void): void {
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
    this.cron.stop();
    this.backendTls?.close();
    this.listeners.close();
    this.flushPending(); // replies of this turn first, as they would have gone out before the close
    for (const c of this.clients.values()) c.socket.destroy();
    this.log.notice('cellgate is now ready to exit, bye bye...');
    process.exit(code);
  }
}

/** Why `appendonly yes` is refused with a `backend` (at start and by CONFIG SET). */
export const APPENDONLY_WITH_BACKEND = 'appendonly yes is not used with a backend: the limiter state lives on the backend (docs/backend.md), not in this process';

/**
 * `maxmemory-clients` in bytes: a byte count, or a percentage of maxmemory (0 = off, and off for a
 * percentage while maxmemory is 0), as Redis's getClientEvictionLimit.
 */
function clientsMemoryLimit(value: string, maxmemoryBytes: number): number {
  if (value.endsWith('%')) return Math.floor((maxmemoryBytes * Number(value.slice(0, -1))) / 100);
  return Number(value);
}
