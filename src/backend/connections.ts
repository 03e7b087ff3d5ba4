/**
 * The connections to the shared backend (docs/backend.md): one ioredis client (a Cluster client for
 * `redis-cluster://`, a Sentinel-aware client for `redis-sentinel://`) set up for a rate limiter,
 * and one command sent with Buffer replies.
 */
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Command, Redis, type RedisOptions } from 'ioredis';
import type { BackendTarget } from './backend-url.js';

export type Client = Redis | Cluster;

/** Reconnect backoff: 50 ms doubling up to 2 s. */
const MAX_RECONNECT_DELAY_MS = 2000;

/** What a connection needs besides the URL (settings). */
export interface ConnectExtras {
  /** The Sentinels' own credentials (backend-sentinel-username / -password); '' for none. */
  sentinelUsername: string;
  sentinelPassword: string;
  /**
   * The TLS options of every connection when the URL asks for TLS (backend-tls.ts: one object,
   * updated in place when the files change, read by ioredis at each connect).
   */
  tls: ConnectionOptions;
}

/** A client for `t` (connecting in the background); `timeoutMs` is backend-timeout at the start. */
export function connectBackend(t: BackendTarget, timeoutMs: number, extras: ConnectExtras): Client {
  const common: RedisOptions = {
    username: t.username,
    password: t.password,
    // Calls never wait for a connection: while there is none they fail at once and get the
    // policy's answer (a rate limiter must answer within its timeout, not queue).
    enableOfflineQueue: false,
    // Concurrent calls are pipelined on the connection either way (ioredis writes each command at
    // once without waiting for earlier replies, and Node coalesces writes queued behind a busy
    // socket). Its auto-pipelining mode also groups a turn's commands into one pipeline object,
    // which measured 1-3 µs more sidecar CPU per call here and no less Redis CPU
    // (bench/RESULTS.md, "Shared backend"): off.
    enableAutoPipelining: false,
    maxRetriesPerRequest: 0,
    connectTimeout: Math.max(1000, timeoutMs * 10),
    lazyConnect: false,
    tls: t.tls ? extras.tls : undefined,
    retryStrategy: (times: number) => Math.min(MAX_RECONNECT_DELAY_MS, 50 * 2 ** Math.min(times, 6)),
  };
  if (t.mode === 'cluster') {
    return new Cluster(t.nodes, {
      enableOfflineQueue: false,
      enableAutoPipelining: false,
      clusterRetryStrategy: (times: number) => Math.min(MAX_RECONNECT_DELAY_MS, 50 * 2 ** Math.min(times, 6)),
      // Follow a failover quickly: the slot map is refreshed on MOVED and on errors.
      retryDelayOnFailover: 20,
      retryDelayOnClusterDown: 50,
      retryDelayOnTryAgain: 20,
      // A slot map refresh asks one node at a time and moves on when it does not answer: a paused
      // master must not hold the refresh that moves its slots away for long.
      slotsRefreshTimeout: Math.max(500, timeoutMs * 2),
      // Each master's connection opens at its first command (the pool's own choice, which `common`'s
      // lazyConnect false would override): the Cluster client's ready check (CLUSTER INFO) goes to
      // a node at once, and a node connection already opening but not ready is refused at once
      // without the offline queue, so eager connections made the check fail, and the client start
      // again, for as long as they lost that race (on a busy machine: for good).
      redisOptions: { ...common, retryStrategy: undefined, lazyConnect: true } as RedisOptions,
    });
  }
  if (t.mode === 'sentinel') {
    return new Redis({
      ...common,
      sentinels: t.nodes,
      name: t.masterName,
      role: 'master',
      db: t.db,
      sentinelUsername: extras.sentinelUsername === '' ? undefined : extras.sentinelUsername,
      sentinelPassword: extras.sentinelPassword === '' ? undefined : extras.sentinelPassword,
      // Asked again at each reconnect; after a failover the Sentinels name the new master.
      sentinelRetryStrategy: (times: number) => Math.min(MAX_RECONNECT_DELAY_MS, 50 * 2 ** Math.min(times, 6)),
      // Told of a failover by the Sentinels (+switch-master) rather than only when the old master
      // closes the connection: the switch is followed as soon as they announce it.
      failoverDetector: true,
      // A master that Sentinel demoted answers -READONLY to the scripts: reconnect (to the master
      // the Sentinels name now) rather than keep sending there.
      reconnectOnError: (e: Error) => (e.message.startsWith('READONLY') ? 1 : false),
    });
  }
  return new Redis({ ...common, host: t.nodes[0].host, port: t.nodes[0].port, db: t.db });
}

/**
 * Sends one command with Buffer replies. Not through `callBuffer`: with auto-pipelining on, ioredis 6
 * drops the command name of call/callBuffer on its way into the pipeline.
 */
export function send(client: Client, name: string, args: (Buffer | string | number)[]): Promise<unknown> {
  const command = new Command(name, args, { replyEncoding: null });
  client.sendCommand(command);
  return command.promise;
}
