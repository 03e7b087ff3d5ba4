/**
 * Prometheus metrics (SPEC §7): `GET /metrics` on `metrics-port` (off when 0), in the text
 * exposition format, on the same addresses as the server (`bind`). The numbers are the ones INFO
 * shows, named the Prometheus way (`_total` counters, base units).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { TYPE_NAMES } from '../keyspace/keyspace.js';
import { VERSION, REDIS_VERSION, type Server } from './server.js';

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

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** The whole exposition, read from the server's counters at the time of the scrape. */
export function metricsText(server: Server): string {
  const s = server.stats;
  const ks = server.keyspace;
  const m = process.memoryUsage();
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
  const keys: Sample[] = Object.entries(TYPE_NAMES).map(([type, name]) => [{ type: name }, ks.countOfType(Number(type))]);
  return [
    family('cellgate_info', 'gauge', 'Version information.', [[{ version: VERSION, redis_version: REDIS_VERSION }, 1]]),
    family('cellgate_uptime_seconds', 'gauge', 'Seconds since the server started.', [[null, Math.floor((Date.now() - server.startedMs) / 1000)]]),
    family('cellgate_connected_clients', 'gauge', 'Client connections open now.', [[null, server.clients.size]]),
    family('cellgate_connections_received_total', 'counter', 'Connections accepted.', [[null, s.totalConnections]]),
    family('cellgate_rejected_connections_total', 'counter', 'Connections refused (maxclients, protected mode).', [[null, s.rejectedConnections]]),
    family('cellgate_commands_processed_total', 'counter', 'Commands run.', [[null, s.totalCommands]]),
    family('cellgate_command_calls_total', 'counter', 'Calls per command.', calls),
    family('cellgate_command_duration_seconds_total', 'counter', 'Time spent running each command.', seconds),
    family('cellgate_command_errors_total', 'counter', 'Calls per command answered with an error or refused.', failed),
    family('cellgate_limiter_decisions_total', 'counter', 'Limiter decisions per command and result.', limiterSamples),
    family('cellgate_keys', 'gauge', 'Keys in the keyspace per algorithm.', keys),
    family('cellgate_expired_keys_total', 'counter', 'Keys removed because they expired.', [[null, ks.expiredCount]]),
    family('cellgate_evicted_keys_total', 'counter', 'Keys removed by maxmemory eviction.', [[null, ks.evictedCount]]),
    family('cellgate_memory_used_bytes', 'gauge', 'V8 heap in use plus array buffers (INFO used_memory).', [[null, m.heapUsed + m.arrayBuffers]]),
    family('cellgate_memory_rss_bytes', 'gauge', 'Resident set size of the process.', [[null, m.rss]]),
    family('cellgate_net_input_bytes_total', 'counter', 'Bytes received from clients.', [[null, s.netInputBytes]]),
    family('cellgate_net_output_bytes_total', 'counter', 'Bytes sent to clients.', [[null, s.netOutputBytes]]),
    family('cellgate_auth_failures_total', 'counter', 'Failed AUTH and HELLO AUTH attempts.', [[null, s.authFailures]]),
    family('cellgate_snapshot_changes_since_last_save', 'gauge', 'Writes since the last snapshot.', [[null, server.snapshots.changesSinceLastSave]]),
    family('cellgate_snapshot_last_save_timestamp_seconds', 'gauge', 'When the last snapshot was saved (server clock).', [[null, Math.floor(server.snapshots.lastSaveMs / 1000)]]),
    family('cellgate_snapshot_last_bgsave_ok', 'gauge', 'Whether the last background save succeeded (INFO rdb_last_bgsave_status: 1 ok, 0 err).', [[null, server.snapshots.lastBgsaveSucceeded ? 1 : 0]]),
    family('cellgate_loading', 'gauge', 'Whether the snapshot is loading (INFO loading).', [[null, server.snapshots.loading ? 1 : 0]]),
  ].join('');
}

/** Listens for scrapes on `port` of every address given (those the server itself listens on). */
export async function startMetrics(server: Server, addresses: string[], port: number): Promise<http.Server[]> {
  const listeners: http.Server[] = [];
  for (const address of addresses) {
    const listener = http.createServer((req, res) => {
      if (req.method !== 'GET' || (req.url !== '/metrics' && req.url !== '/')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
        return;
      }
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(metricsText(server));
    });
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen({ host: address, port, ipv6Only: address.includes(':') }, () => {
        listener.off('error', reject);
        resolve();
      });
    });
    port = (listener.address() as AddressInfo).port;
    listeners.push(listener);
  }
  return listeners;
}
