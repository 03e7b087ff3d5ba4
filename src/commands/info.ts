/**
 * INFO [section ...]: Redis's sections and field names, so dashboards and client ready-checks
 * (`loading:0`, `redis_version:`) work unchanged, plus a `limiter` section.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import { KEY_TYPES } from '../limiters/registry.js';
import { REDIS_VERSION, VERSION } from '../version.js';
import { processMemory } from '../server/memory.js';
import { noKeys, type CommandContext, type CommandServer, type CommandSpec } from './types.js';

type Section = (server: CommandServer, nowUs: number) => [string, string | number][];

/** A server's replication ID: 40 random hex digits made at its first INFO, as Redis makes one at start. */
const replicationIds = new WeakMap<CommandServer, string>();
function replicationId(server: CommandServer): string {
  let id = replicationIds.get(server);
  if (id === undefined) {
    id = randomBytes(20).toString('hex');
    replicationIds.set(server, id);
  }
  return id;
}

function human(bytes: number): string {
  const units = ['B', 'K', 'M', 'G', 'T'];
  let v = bytes;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${bytes}B` : `${v.toFixed(2)}${units[u]}`;
}

const SECTIONS: Record<string, Section> = {
  server: (s, nowUs) => [
    ['redis_version', REDIS_VERSION],
    ['cellgate_version', VERSION],
    ['redis_mode', 'standalone'],
    ['os', `${os.type()} ${os.release()} ${os.arch()}`],
    ['arch_bits', 64],
    ['process_id', process.pid],
    ['run_id', s.runId],
    ['tcp_port', s.port],
    ['tls_port', s.tlsPort],
    ['server_time_usec', nowUs],
    ['uptime_in_seconds', Math.floor((Date.now() - s.startedMs) / 1000)],
    ['uptime_in_days', Math.floor((Date.now() - s.startedMs) / 86400000)],
    ['hz', s.config.int('hz')],
    ['node_version', process.versions.node],
    ['executable', process.argv[1] ?? ''],
    ['config_file', s.config.configFile],
    ['clock_mode', s.clock.frozen ? 'debug' : 'real'],
  ],
  clients: (s) => {
    let watching = 0;
    for (const c of s.clients.values()) if (c.watching !== null) watching++;
    return [
      ['connected_clients', s.clients.size],
      ['maxclients', s.config.int('maxclients')],
      ['tls_handshakes_in_progress', s.tlsHandshakesInProgress],
      ['blocked_clients', s.leaseWaiters.waiting],
      ['watching_clients', watching],
      ['total_watched_keys', s.keyspace.watchedKeyCount],
      // The clients' memory accounts (CLIENT LIST tot-mem): their sum, what maxmemory-clients limits, and the largest.
      ['clients_total_memory', s.clientsMemory.total],
      ['client_largest_memory', s.clientsMemory.largest()],
    ];
  },
  memory: (s) => {
    const m = processMemory();
    const heap = m.heapUsed + m.arrayBuffers;
    // used_memory is the one figure maxmemory is compared with (src/server/memory.ts): startup +
    // dataset, counted. The heap as measured now holds more (client buffers, garbage not yet
    // collected): that part is mem_not_counted_for_evict.
    const used = s.memory.countedBytes;
    const clientBytes = s.clientsMemory.total;
    return [
      ['used_memory', used],
      ['used_memory_human', human(used)],
      ['used_memory_rss', m.rss],
      ['used_memory_rss_human', human(m.rss)],
      ['used_memory_heap', heap],
      ['used_memory_heap_total', m.heapTotal],
      ['used_memory_startup', s.memory.startupBytes],
      ['used_memory_dataset', s.keyspace.datasetBytes],
      ['used_memory_counted_for_evict', used],
      ['mem_not_counted_for_evict', Math.max(0, heap - used)],
      ['mem_clients_normal', clientBytes],
      ['eviction_step_max_keys', s.memory.largestStep],
      ['maxmemory', s.config.int('maxmemory')],
      ['maxmemory_human', human(s.config.int('maxmemory'))],
      ['maxmemory_policy', s.config.get('maxmemory-policy')],
      ['maxmemory_clients', s.clientsMemory.limitBytes],
      ['lazyfree_pending_watches', s.pendingWatchFrees],
      ['mem_allocator', `v8-${process.versions.v8}`],
    ];
  },
  persistence: (s) => s.snapshots.infoRows(),
  stats: (s) => [
    ['total_connections_received', s.stats.totalConnections],
    ['total_commands_processed', s.stats.totalCommands],
    ['instantaneous_ops_per_sec', s.stats.instantaneousOps],
    ['total_net_input_bytes', s.stats.netInputBytes],
    ['total_net_output_bytes', s.stats.netOutputBytes],
    ['rejected_connections', s.stats.rejectedConnections],
    ['expired_keys', s.keyspace.expiredCount],
    ['evicted_keys', s.keyspace.evictedCount],
    ['keyspace_hits', s.stats.keyspaceHits],
    ['keyspace_misses', s.stats.keyspaceMisses],
    ['total_error_replies', s.stats.errorReplies],
    ['acl_access_denied_auth', s.stats.authFailures],
    ['acl_access_denied_cmd', s.stats.aclDeniedCmd],
    ['acl_access_denied_key', s.stats.aclDeniedKey],
    ['acl_access_denied_channel', 0],
    ['client_query_buffer_limit_disconnections', s.stats.queryBufferLimitDisconnections],
    ['client_output_buffer_limit_disconnections', s.stats.outputLimitDisconnections],
    ['evicted_clients', s.clientsMemory.evictions],
    ['lazyfree_watch_slices', s.watchFreeSlices],
    ['lazyfree_watch_slice_max_us', s.watchFreeSliceMaxUs],
    ['periodic_task_runs', s.periodicRuns],
    ['periodic_task_errors', s.tasks.errors],
    ['accept_errors', s.stats.acceptErrors],
    ['tls_handshake_timeouts', s.stats.tlsHandshakeTimeouts],
  ],
  // What Redis 7 prints for a master without replicas: tools read master_replid/offset to tell
  // servers apart and to wait for replication (here there is none, so the offset stays 0).
  replication: (s) => [
    ['role', 'master'],
    ['connected_slaves', 0],
    ['master_failover_state', 'no-failover'],
    ['master_replid', replicationId(s)],
    ['master_replid2', '0000000000000000000000000000000000000000'],
    ['master_repl_offset', 0],
    ['second_repl_offset', -1],
    ['repl_backlog_active', 0],
    ['repl_backlog_size', 1048576],
    ['repl_backlog_first_byte_offset', 0],
    ['repl_backlog_histlen', 0],
  ],
  cluster: () => [['cluster_enabled', 0]],
  cpu: () => {
    const u = process.cpuUsage();
    return [
      ['used_cpu_sys', (u.system / 1e6).toFixed(6)],
      ['used_cpu_user', (u.user / 1e6).toFixed(6)],
    ];
  },
  errorstats: (s) => [...s.stats.errors].map(([code, n]) => [`errorstat_${code}`, `count=${n}`]),
  commandstats: (s) =>
    // Only commands that were called, failed or refused, as Redis (a command queued by MULTI and never run is not).
    [...s.stats.commands].filter(([, c]) => c.calls > 0 || c.rejectedCalls > 0 || c.failedCalls > 0).map(([name, c]) => [
      `cmdstat_${name}`,
      `calls=${c.calls},usec=${Math.round(c.usec)},usec_per_call=${c.calls ? (c.usec / c.calls).toFixed(2) : '0.00'},rejected_calls=${c.rejectedCalls},failed_calls=${c.failedCalls}`,
    ]),
  limiter: (s) => {
    const rows: [string, string | number][] = [];
    for (const [type, name] of KEY_TYPES) rows.push([`keys_${name}`, s.keyspace.countOfType(type)]);
    for (const [name, l] of s.stats.limiters) rows.push([`limiter_${name}`, `allowed=${l.allowed},limited=${l.limited}`]);
    // RL.ACQUIRE ... WAIT: waiting now, granted while waiting, ended by their timeout.
    const w = s.leaseWaiters;
    rows.push(['lease_waiters', w.waiting], ['lease_waits_granted', w.granted], ['lease_waits_timed_out', w.timedOut]);
    return rows;
  },
  // The shared backend (docs/backend.md); empty in local mode.
  backend: (s) => {
    const b = s.backend;
    if (b === null) return [];
    return [
      ['backend_url', b.target.display],
      ['backend_mode', b.target.mode],
      ['backend_prefix', b.prefix],
      ['backend_state', b.state],
      ['backend_unavailable', b.policy],
      ['backend_timeout_ms', b.timeoutMs],
      ['backend_state_changes', b.stateChanges],
      ['backend_calls', b.calls],
      ['backend_batches', b.batchStats.batches],
      ['backend_batched_calls', b.batchStats.calls],
      ['backend_batch_sizes', b.batchStats.histogram()],
      ['backend_errors', b.errors],
      ['backend_timeouts', b.timeouts],
      ['backend_policy_decisions', b.policyDecisions],
      ['backend_pending', b.pending],
      ['backend_pending_peak', b.pendingPeak],
      ['backend_overflows', b.overflows],
      ['backend_reached', b.reached ? 1 : 0],
      ['backend_first_contact_waits', b.firstContact?.waited ?? 0],
      ['backend_first_contact_expired', b.firstContact?.expired ?? 0],
      ['backend_first_contact_waiting', b.firstContact?.size ?? 0],
      ['backend_nodes_down', b.nodesDown],
      ['backend_cache_hits', b.cache.hits],
      ['backend_cache_entries', b.cache.size],
      ['backend_cache_enabled', b.cache.enabled ? 1 : 0],
      ['backend_invalidations_received', b.invalidationsReceived],
      ['backend_invalidation_ack_timeouts', b.invalidationAckTimeouts],
      ['backend_last_error', b.lastError.replace(/[\r\n]+/g, ' ')],
      ...(b.target.tls && b.tls !== null ? [
        ['backend_tls_reloads', b.tls.reloads],
        ['backend_tls_reload_errors', b.tls.reloadErrors],
        ['backend_tls_last_error', b.tls.lastError.replace(/[\r\n]+/g, ' ')],
      ] as [string, string | number][] : []),
    ];
  },
  keyspace: (s) => (s.keyspace.size > 0 ? [['db0', `keys=${s.keyspace.size},expires=${s.keyspace.size},avg_ttl=${Math.round(s.keyspace.avgTtlMs)}`]] : []),
};

const TITLES: Record<string, string> = {
  server: 'Server', clients: 'Clients', memory: 'Memory', persistence: 'Persistence', stats: 'Stats',
  replication: 'Replication', cpu: 'CPU', errorstats: 'Errorstats', commandstats: 'Commandstats', cluster: 'Cluster',
  limiter: 'Limiter', backend: 'Backend', keyspace: 'Keyspace',
};
const DEFAULT = ['server', 'clients', 'memory', 'persistence', 'stats', 'replication', 'cpu', 'errorstats', 'cluster', 'limiter', 'backend', 'keyspace'];
const ALL = [...DEFAULT.slice(0, -1), 'commandstats', 'keyspace'];

/** A section of a room above the commands (the rate limit service's `rls`, src/rls): main.ts registers it at start. */
export interface InfoExtension {
  name: string;
  title: string;
  rows(): [string, string | number][];
}
export const infoExtensions: InfoExtension[] = [];

/** Builds the INFO text for the requested sections (Redis's `default`, `all`, `everything` too). */
export function infoText(server: CommandServer, nowUs: number, requested: string[]): string {
  let names: string[];
  const every = requested.length === 0 || requested.includes('default') || requested.includes('all') || requested.includes('everything');
  if (requested.length === 0 || requested.includes('default')) names = DEFAULT;
  else if (requested.includes('all') || requested.includes('everything')) names = ALL;
  else names = ALL.filter((n) => requested.includes(n));
  const parts: string[] = [];
  const section = (title: string, rows: [string, string | number][]): void => {
    parts.push(`# ${title}\r\n` + rows.map(([k, v]) => `${k}:${v}\r\n`).join(''));
  };
  for (const name of names) section(TITLES[name], SECTIONS[name](server, nowUs));
  for (const x of infoExtensions) if (every || requested.includes(x.name)) section(x.title, x.rows());
  return parts.join('\r\n');
}

function info(ctx: CommandContext, argv: CommandArgs): void {
  const requested = argv.lowerFrom(1);
  ctx.reply.verbatim(infoText(ctx.server, ctx.nowUs, requested));
}

export const infoCommands: CommandSpec[] = [
  { name: 'info', arity: -1, flags: ['loading', 'stale'], aclExtra: ['dangerous'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns information and statistics about the server.', args: [{ name: 'section', type: 'string', optional: true, multiple: true }], run: info },
];
