/**
 * Prometheus metrics: `GET /metrics` on `metrics-port` (off when 0), in the text exposition format,
 * and the health endpoints probes poll (docs/metrics.md): `GET /healthz` answers 200
 * while the process serves, `GET /readyz` 200 when the server can take traffic, else 503 with the
 * reason (see `notReadyReason`). All of it on the addresses of `metrics-bind` (loopback by default: the numbers tell who uses the server and
 * how, and the port has no password). The numbers are the ones INFO shows, named the Prometheus way
 * (`_total` counters, base units).
 *
 * Nobody can hold the port (docs/metrics.md): at most METRICS_MAX_CONNECTIONS connections
 * are served at once, shared among the addresses, each address with its own share (so connections to
 * one address, a pod's say, never take the share of another, loopback); a new connection beyond its
 * share takes the place of the one that has waited longest for a request of its own (idle, kept
 * alive, or sending its headers slowly) instead of being refused, so a prober's connection is always
 * served. One answering a request never makes room; the connections beyond the share (at most
 * METRICS_MAX_REFUSING) are answered `503` with `Retry-After` (the health endpoints as usual), so a
 * burst gets a status, never silence. `metrics-timeout` closes
 * connections that send nothing, take longer over their headers or request, or stay idle between
 * keep-alive requests; a connection serves at most METRICS_MAX_REQUESTS_PER_CONNECTION requests.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { KEY_TYPES } from '../limiters/registry.js';
import type { Server } from './server.js';
import { REDIS_VERSION, VERSION } from '../version.js';
import type { CommandStat } from './stats.js';
import { processMemory } from './memory.js';
import { DURATION_BOUNDS_US } from './stats.js';
import { streamExposition } from './metrics-stream.js';
import { DEGRADED_MODES } from './degraded.js';

/** Metrics-port connections served at once. */
export const METRICS_MAX_CONNECTIONS = 16;
/**
 * Connections beyond METRICS_MAX_CONNECTIONS: a new connection while every served one is answering
 * a request, and served ones that waited for a request and were moved out to make room. Each is told
 * `503` with `Retry-After` if it sends a request (`/healthz` and `/readyz` still answered) and closed,
 * so that a burst of scrapes or `/json` calls gets a status instead of nothing; beyond these the one
 * that waited longest for a request is closed. The server reserves both in its descriptor budget.
 */
export const METRICS_MAX_REFUSING = 48;
export const METRICS_MAX_DESCRIPTORS = METRICS_MAX_CONNECTIONS + METRICS_MAX_REFUSING;
/** Bytes of a request's line and headers: beyond it the request is answered 431 and the connection closed. */
export const METRICS_MAX_HEADER_BYTES = 16 * 1024;
/** Seconds a refused client is told to wait (Retry-After). */
const RETRY_AFTER_SECONDS = 1;
/** Requests one keep-alive connection may make; the last is answered with `Connection: close`. */
export const METRICS_MAX_REQUESTS_PER_CONNECTION = 100;

/**
 * A service that shares the metrics port (the rate limit service, src/rls): its metric families,
 * its readiness, and the requests it answers itself (`POST /json`). main.ts registers it.
 */
export interface MetricsExtension {
  /** Its families in the text format, in parts (a large family cut in several: sent in slices). */
  metricsParts(): Iterable<string>;
  notReadyReason(): string | null;
  /** Answers the request (true) or leaves it to the metrics port (false). */
  handleHttp(req: http.IncomingMessage, res: http.ServerResponse): boolean;
}

export const metricsExtensions: MetricsExtension[] = [];

/** Connections closed to make room for new ones (cellgate_metrics_connections_evicted_total). */
let evictedConnections = 0;
/** Requests answered 503 because every connection was answering, and connections closed at once beyond that. */
let refusedRequests = 0;
let refusedConnections = 0;

/** What the eviction needs to know about one connection. */
interface MetricsConnection {
  /** A response is being written (a /metrics body to a slow reader): the last to be evicted. */
  answering: boolean;
  /** Since when it has been waiting for a request: accepted, or its last response done (Date.now()). */
  waitingSinceMs: number;
  /** Requests received on it so far (METRICS_MAX_REQUESTS_PER_CONNECTION). */
  requests: number;
}

type Sample = [labels: Record<string, string> | null, value: number];

/** One metric family: HELP and TYPE lines, then its samples. */
function family(name: string, type: 'counter' | 'gauge', help: string, samples: Sample[]): string {
  let out = `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
  for (const [labels, value] of samples) {
    const l = labels === null ? '' : `{${Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}`;
    out += `${name}${l} ${Number.isFinite(value) ? value : 0}\n`;
  }
  return out;
}

/** The `le` label of each bucket, in seconds, rendered once. */
const DURATION_LE = [...DURATION_BOUNDS_US.map((us) => String(us / 1e6)), '+Inf'];

/**
 * The per-command latency histogram, from the non-cumulative bucket counts execute() keeps: buckets
 * made cumulative here, `_count` their total (every timed call is in exactly one bucket).
 */
function durationHistogram(commands: Map<string, CommandStat>): string {
  const name = 'cellgate_command_duration_seconds';
  let out = `# HELP ${name} Time to run each command (histogram; calls refused before running are not timed).\n# TYPE ${name} histogram\n`;
  for (const [command, c] of commands) {
    const label = escapeLabel(command);
    let cumulative = 0;
    for (let i = 0; i < c.durationBuckets.length; i++) {
      cumulative += c.durationBuckets[i];
      out += `${name}_bucket{command="${label}",le="${DURATION_LE[i]}"} ${cumulative}\n`;
    }
    out += `${name}_sum{command="${label}"} ${c.usec / 1e6}\n${name}_count{command="${label}"} ${cumulative}\n`;
  }
  return out;
}

/**
 * Why the server should not take traffic now, or null when it is ready: the snapshot is still
 * loading (commands get LOADING), or the last background save failed or the journal cannot be
 * written (the limits would not survive a restart; with stop-writes-on-bgsave-error writes are
 * refused too; AppendOnly.notReadyReason). A storage backend, when there
 * is one, adds its state here: this function is the one place readiness is decided.
 */
export function notReadyReason(server: Server): string | null {
  if (server.snapshots.loading) return 'loading the snapshot';
  if (!server.snapshots.lastBgsaveSucceeded) return 'the last background save failed (INFO persistence rdb_last_bgsave_status:err)';
  const journal = server.journal.notReadyReason();
  if (journal !== null) return journal;
  // With `local` or `allow` every call is still answered sensibly; with `deny` every one is refused.
  const b = server.backend;
  // Not reached yet since the start: calls wait for it (up to backend-timeout each), and a load
  // balancer should not send any before it is reached, whatever the policy.
  if (b !== null && !b.reached) return `backend not reached yet (${b.state}${b.lastError !== '' ? `: ${b.lastError.replace(/[\r\n]+/g, ' ')}` : ''})`;
  if (b !== null && !b.usable && b.policy === 'deny') return `backend unavailable (${b.state}; backend-unavailable deny refuses every call)`;
  for (const x of metricsExtensions) {
    const reason = x.notReadyReason();
    if (reason !== null) return reason;
  }
  return null;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/**
 * The exposition in parts, each read when it is rendered: the server's own families, then the
 * extensions' (sent in slices by metrics-stream.ts, so counters read in a later slice may have
 * moved since an earlier one, as between two scrapes).
 */
export function* metricsParts(server: Server): Generator<string> {
  const s = server.stats;
  const ks = server.keyspace;
  const m = processMemory();
  const limiterSamples: Sample[] = [];
  for (const [command, l] of s.limiters) {
    limiterSamples.push([{ command, result: 'allowed' }, l.allowed], [{ command, result: 'limited' }, l.limited]);
  }
  const calls: Sample[] = [];
  const seconds: Sample[] = [];
  const failed: Sample[] = [];
  for (const [command, c] of s.commands) {
    calls.push([{ command }, c.calls]);
    seconds.push([{ command }, c.usec / 1e6]);
    failed.push([{ command }, c.failedCalls + c.rejectedCalls]);
  }
  const keys: Sample[] = KEY_TYPES.map(([type, name]) => [{ type: name }, ks.countOfType(type)]);
  yield* [
    family('cellgate_info', 'gauge', 'Version information.', [[{ version: VERSION, redis_version: REDIS_VERSION }, 1]]),
    family('cellgate_uptime_seconds', 'gauge', 'Seconds since the server started.', [[null, Math.floor((Date.now() - server.startedMs) / 1000)]]),
    family('cellgate_connected_clients', 'gauge', 'Client connections open now.', [[null, server.clients.size]]),
    family('cellgate_connections_received_total', 'counter', 'Connections accepted.', [[null, s.totalConnections]]),
    family('cellgate_rejected_connections_total', 'counter', 'Connections refused (maxclients, protected mode).', [[null, s.rejectedConnections]]),
    family('cellgate_commands_processed_total', 'counter', 'Commands run.', [[null, s.totalCommands]]),
    family('cellgate_command_calls_total', 'counter', 'Calls per command.', calls),
    family('cellgate_command_duration_seconds_total', 'counter', 'Time spent running each command.', seconds),
    durationHistogram(s.commands),
    family('cellgate_command_errors_total', 'counter', 'Calls per command answered with an error or refused.', failed),
    family('cellgate_limiter_decisions_total', 'counter', 'Limiter decisions per command and result.', limiterSamples),
    // With a backend the limiter keys live in Redis, and the local keyspace would read 0 (or the few
    // keys of backend-unavailable local): the family is left out rather than shown wrong.
    ...(server.backend === null ? [family('cellgate_keys', 'gauge', 'Keys in the keyspace per algorithm.', keys)] : []),
    family('cellgate_expired_keys_total', 'counter', 'Keys removed because they expired.', [[null, ks.expiredCount]]),
    family('cellgate_evicted_keys_total', 'counter', 'Keys removed by maxmemory eviction.', [[null, ks.evictedCount]]),
    family('cellgate_memory_used_bytes', 'gauge', 'Start-up memory plus the keys, what maxmemory is compared with (INFO used_memory).', [[null, server.memory.countedBytes]]),
    family('cellgate_memory_heap_bytes', 'gauge', 'V8 heap in use plus array buffers, measured now (INFO used_memory_heap).', [[null, m.heapUsed + m.arrayBuffers]]),
    family('cellgate_memory_rss_bytes', 'gauge', 'Resident set size of the process.', [[null, m.rss]]),
    family('cellgate_clients_memory_bytes', 'gauge', 'The clients\' memory accounts together, what maxmemory-clients limits (INFO clients_total_memory).', [[null, server.clientsMemory.total]]),
    family('cellgate_evicted_clients_total', 'counter', 'Clients closed because all clients together held more than maxmemory-clients.', [[null, server.clientsMemory.evictions]]),
    family('cellgate_net_input_bytes_total', 'counter', 'Bytes received from clients.', [[null, s.netInputBytes]]),
    family('cellgate_net_output_bytes_total', 'counter', 'Bytes sent to clients.', [[null, s.netOutputBytes]]),
    family('cellgate_auth_failures_total', 'counter', 'Failed AUTH and HELLO AUTH attempts.', [[null, s.authFailures]]),
    family('cellgate_metrics_connections_evicted_total', 'counter', 'Metrics-port connections that waited for a request moved out of the 16 served to make room for a new one (closed if kept alive after a response, else a request they send is answered 503).', [[null, evictedConnections]]),
    family('cellgate_metrics_busy_refusals_total', 'counter', 'Metrics-port requests answered 503 (Retry-After) beyond the 16 served connections, and connections closed beyond the 48 refusals.', [[{ result: 'status_503' }, refusedRequests], [{ result: 'closed' }, refusedConnections]]),
    family('cellgate_snapshot_changes_since_last_save', 'gauge', 'Writes since the last snapshot.', [[null, server.snapshots.changesSinceLastSave]]),
    family('cellgate_snapshot_last_save_timestamp_seconds', 'gauge', 'When the last snapshot was saved (server clock).', [[null, Math.floor(server.snapshots.lastSaveMs / 1000)]]),
    family('cellgate_snapshot_last_bgsave_ok', 'gauge', 'Whether the last background save succeeded (INFO rdb_last_bgsave_status: 1 ok, 0 err).', [[null, server.snapshots.lastBgsaveSucceeded ? 1 : 0]]),
    ...journalFamilies(server),
    ...backendFamilies(server),
    family('cellgate_loading', 'gauge', 'Whether the snapshot is loading (INFO loading).', [[null, server.snapshots.loading ? 1 : 0]]),
    degradedFamily(server),
  ];
  for (const x of metricsExtensions) yield* x.metricsParts();
}

/** Each degraded mode, 1 while in force (INFO degraded, src/server/degraded.ts). */
function degradedFamily(server: Server): string {
  const now = server.degraded.current();
  return family('cellgate_degraded', 'gauge', 'Whether each degraded mode is in force: backend_unavailable (calls answered by backend-unavailable), rls_no_config, journal_not_writing, snapshot_failing.',
    DEGRADED_MODES.map((mode) => [{ mode }, now.has(mode) ? 1 : 0]));
}

/** The append-only journal's figures (INFO persistence aof_*), named as INFO names them. */
function journalFamilies(server: Server): string[] {
  const j = server.journal.metrics();
  return [
    family('cellgate_aof_enabled', 'gauge', 'Whether the append-only journal is on (INFO aof_enabled).', [[null, j.enabled ? 1 : 0]]),
    family('cellgate_aof_last_write_ok', 'gauge', 'Whether the journal\'s last write and fsync succeeded (INFO aof_last_write_status: 1 ok, 0 err).', [[null, j.lastWriteOk ? 1 : 0]]),
    family('cellgate_aof_write_errors_total', 'counter', 'Journal writes and fsyncs that failed (each retry counts).', [[null, j.writeErrors]]),
    family('cellgate_aof_delayed_fsync_total', 'counter', 'everysec fsyncs still running 2 s after they started (INFO aof_delayed_fsync).', [[null, j.delayedFsyncs]]),
    family('cellgate_aof_buffer_bytes', 'gauge', 'Journal records encoded and not written yet (INFO aof_buffer_length).', [[null, j.bufferBytes]]),
    family('cellgate_aof_written_bytes_total', 'counter', 'Journal record bytes written.', [[null, j.writtenBytes]]),
    family('cellgate_aof_records_total', 'counter', 'Journal records encoded.', [[null, j.records]]),
    family('cellgate_aof_current_size_bytes', 'gauge', 'The journal\'s size on disk, base and incremental files (INFO aof_current_size).', [[null, j.currentBytes]]),
    family('cellgate_aof_base_size_bytes', 'gauge', 'The journal\'s base file size (INFO aof_base_size).', [[null, j.baseBytes]]),
    family('cellgate_aof_rewrite_in_progress', 'gauge', 'Whether a journal rewrite runs (INFO aof_rewrite_in_progress).', [[null, j.rewriteInProgress ? 1 : 0]]),
    family('cellgate_aof_rewrites_total', 'counter', 'Journal rewrites that succeeded (INFO aof_rewrites).', [[null, j.rewrites]]),
    family('cellgate_aof_last_bgrewrite_ok', 'gauge', 'Whether the last journal rewrite succeeded (INFO aof_last_bgrewrite_status: 1 ok, 0 err).', [[null, j.lastBgrewriteOk ? 1 : 0]]),
    family('cellgate_aof_rewrites_consecutive_failures', 'gauge', 'Journal rewrites failed in a row (INFO aof_rewrites_consecutive_failures).', [[null, j.rewriteFailuresInRow]]),
  ];
}

/** The shared backend's figures (INFO backend), none in local mode. */
function backendFamilies(server: Server): string[] {
  const b = server.backend;
  if (b === null) return [];
  return [
    family('cellgate_backend_up', 'gauge', 'Whether the backend is up (INFO backend_state).', [[null, b.usable ? 1 : 0]]),
    family('cellgate_backend_calls_total', 'counter', 'Limiter scripts sent to the backend.', [[null, b.calls]]),
    family('cellgate_backend_errors_total', 'counter', 'Backend calls that failed (not counting timeouts and decisions such as WRONGTYPE).', [[null, b.errors]]),
    family('cellgate_backend_timeouts_total', 'counter', 'Backend calls not answered within backend-timeout.', [[null, b.timeouts]]),
    family('cellgate_backend_policy_decisions_total', 'counter', 'Limiter calls answered by backend-unavailable.', [[{ policy: b.policy }, b.policyDecisions]]),
    family('cellgate_backend_pending', 'gauge', 'Backend calls sent and not answered yet (INFO backend_pending).', [[null, b.pending]]),
    family('cellgate_backend_first_contact_waits_total', 'counter', 'Limiter calls that waited for the backend\'s first contact after the start.', [[null, b.firstContact?.waited ?? 0]]),
    family('cellgate_backend_first_contact_expired_total', 'counter', 'Of those, the calls answered by backend-unavailable because backend-timeout passed first.', [[null, b.firstContact?.expired ?? 0]]),
    family('cellgate_backend_overflows_total', 'counter', 'Limiter calls answered by backend-unavailable because their node had too many calls pending.', [[null, b.overflows]]),
    family('cellgate_backend_nodes_down', 'gauge', 'Cluster masters marked down (INFO backend_nodes_down).', [[null, b.nodesDown]]),
    family('cellgate_backend_cache_hits_total', 'counter', 'Refusals answered from the local refusal cache.', [[null, b.cache.hits]]),
    family('cellgate_backend_state_changes_total', 'counter', 'Backend state changes (up/down).', [[null, b.stateChanges]]),
  ];
}

/**
 * The connection of `connections` that has waited longest for a request (one that sent nothing,
 * one kept alive after its response, a slow sender of headers), or null when every one is
 * answering a request: one answering is never moved or closed to make room.
 */
function oldestIdle(connections: Map<Socket, MetricsConnection>): Socket | null {
  let victim: Socket | null = null;
  let best: MetricsConnection | null = null;
  for (const [socket, c] of connections) {
    if (c.answering) continue;
    if (best === null || c.waitingSinceMs < best.waitingSinceMs) {
      victim = socket;
      best = c;
    }
  }
  return victim;
}

/**
 * A request on a connection taken while every served one was answering: the health endpoints are
 * answered (a probe must not fail because scrapes are busy), anything else gets 503 with
 * Retry-After once its body is read (a response before the body is read would reach some clients
 * as a reset); the connection closes after it.
 */
function refuseBusy(server: Server, req: http.IncomingMessage, res: http.ServerResponse): void {
  res.shouldKeepAlive = false;
  const path = (req.url ?? '').split('?', 1)[0];
  if (req.method === 'GET' && (path === '/healthz' || path === '/readyz')) {
    answer(server, req, res);
    return;
  }
  refusedRequests++;
  req.resume();
  req.once('end', () => {
    res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': String(RETRY_AFTER_SECONDS), connection: 'close' })
      .end(`busy: ${METRICS_MAX_CONNECTIONS} requests are being answered on this port; retry after ${RETRY_AFTER_SECONDS} s\n`);
  });
}

/** The request handler: `/healthz` first, before any other work. */
function answer(server: Server, req: http.IncomingMessage, res: http.ServerResponse): void {
  const url = req.url ?? '';
  if (req.method === 'GET' && (url === '/healthz' || url.startsWith('/healthz?'))) {
    // Answered from the event loop: a process that answers is alive (a hung loop answers nothing).
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    return;
  }
  const path = url.split('?', 1)[0];
  if (req.method === 'GET' && path === '/readyz') {
    const reason = notReadyReason(server);
    const backend = server.backend === null ? '' : ` (backend ${server.backend.state}, backend-unavailable ${server.backend.policy})`;
    const modes = server.degraded.list();
    const degraded = modes === '' ? '' : ` (degraded: ${modes})`;
    if (reason === null) res.writeHead(200, { 'content-type': 'text/plain' }).end(`ready${backend}${degraded}\n`);
    else res.writeHead(503, { 'content-type': 'text/plain' }).end(`not ready: ${reason}${degraded}\n`);
    return;
  }
  for (const x of metricsExtensions) if (x.handleHttp(req, res)) return;
  if (req.method !== 'GET' || (path !== '/metrics' && path !== '/')) {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics, /healthz or /readyz\n');
    return;
  }
  // In slices, the loop given back between them; whatever fails while rendering (a bug, say) is a
  // 500 or a broken connection, not a crash.
  streamExposition(res, metricsParts(server), 'text/plain; version=0.0.4; charset=utf-8', (e) => server.tasks.failed('metrics scrape', e));
}

/** Listens for scrapes on `port` of every address given (`metrics-bind`). */
export async function startMetrics(server: Server, addresses: string[], port: number): Promise<http.Server[]> {
  const listeners: http.Server[] = [];
  // One budget for all the addresses (the descriptor reserve counts METRICS_MAX_CONNECTIONS once),
  // split so that each address has its own share.
  const share = Math.max(1, Math.floor(METRICS_MAX_CONNECTIONS / Math.max(1, addresses.length)));
  const refusingShare = Math.max(1, Math.floor(METRICS_MAX_REFUSING / Math.max(1, addresses.length)));
  const timeoutMs = server.config.int('metrics-timeout');
  for (const address of addresses) {
    const connections = new Map<Socket, MetricsConnection>();
    /** Connections taken only to be refused (refuseBusy). */
    const refusing = new Map<Socket, MetricsConnection>();
    const listener = http.createServer({
      // A request's headers, and the whole request, within metrics-timeout of its first byte
      // (checked every connectionsCheckingInterval); idle between keep-alive requests as long.
      headersTimeout: timeoutMs,
      maxHeaderSize: METRICS_MAX_HEADER_BYTES,
      requestTimeout: timeoutMs,
      keepAliveTimeout: timeoutMs,
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(timeoutMs / 4))),
    }, (req, res) => {
      const r = refusing.get(req.socket);
      if (r !== undefined) {
        r.answering = true;
        refuseBusy(server, req, res);
        return;
      }
      const c = connections.get(req.socket);
      if (c !== undefined) {
        c.answering = true;
        res.once('close', () => {
          c.answering = false;
          c.waitingSinceMs = Date.now();
        });
        // Node answers the last request with `Connection: close` but leaves the connection open
        // (later requests get 503): close it once that response is written.
        if (++c.requests >= METRICS_MAX_REQUESTS_PER_CONNECTION) res.once('finish', () => req.socket.destroySoon());
      }
      answer(server, req, res);
    });
    listener.maxRequestsPerSocket = METRICS_MAX_REQUESTS_PER_CONNECTION;
    // Not listener.maxConnections: Node would refuse the new connection (a prober's) and keep the
    // idle ones. The share is kept here, by eviction.
    listener.on('connection', (socket: Socket) => {
      const nowMs = Date.now();
      // Among the refusals: when they are full too, the one that waited longest for a request
      // goes (closed), or, if every one is answering, this one.
      const refuse = (s: Socket): void => {
        if (refusing.size >= refusingShare) {
          const old = oldestIdle(refusing);
          refusedConnections++;
          if (old === null) {
            s.destroy();
            return;
          }
          refusing.delete(old);
          old.destroy();
        }
        refusing.set(s, { answering: false, waitingSinceMs: nowMs, requests: 0 });
        s.once('close', () => refusing.delete(s));
      };
      if (connections.size >= share) {
        // The served connection that waited longest for a request makes room. One kept alive after
        // a response is closed (its client opens a new one for its next request, as after any idle
        // close); one that has not sent a request yet joins the refusals (a request it sends, as a
        // client of a burst that connected just before, is told 503, not reset). When every served
        // one is answering, this one is refused instead.
        const victim = oldestIdle(connections);
        if (victim === null) {
          refuse(socket);
          return;
        }
        const served = connections.get(victim)!.requests > 0;
        connections.delete(victim);
        evictedConnections++;
        if (served) victim.destroy();
        else refuse(victim);
      }
      connections.set(socket, { answering: false, waitingSinceMs: nowMs, requests: 0 });
      socket.once('close', () => connections.delete(socket));
    });
    // A connection that sends nothing at all is closed by the socket timeout (headersTimeout only
    // starts with the first byte of a request).
    listener.setTimeout(timeoutMs, (socket) => socket.destroy());
    listener.on('clientError', (e: NodeJS.ErrnoException, socket) => {
      // Headers over METRICS_MAX_HEADER_BYTES: said so, then closed; any other malformed request: closed.
      if (socket.writableEnded) return; // answered 431 already: the parser reports the rest too
      if (e.code !== 'HPE_HEADER_OVERFLOW' || !socket.writable) {
        socket.destroy();
        return;
      }
      socket.end('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      // What the peer still sends is not read: the connection goes once the reply had a moment to leave.
      setTimeout(() => socket.destroy(), 1000).unref();
    });
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen({ host: address, port, ipv6Only: address.includes(':') }, () => {
        listener.off('error', reject);
        listener.on('error', (e) => server.acceptFailed(e));
        resolve();
      });
    });
    port = (listener.address() as AddressInfo).port;
    listeners.push(listener);
  }
  return listeners;
}
