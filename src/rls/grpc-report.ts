/**
 * What the gRPC door shows: INFO's rls_grpc_* fields and its metric families (connections, refusals
 * by reason, bytes held in unfinished messages against their budgets, calls ended by a budget or
 * a deadline, certificate reloads).
 */
import type { RlsGrpcServer } from './grpc.js';

/** INFO rls: the door's state and its bounds in force. */
export function grpcInfoRows(g: RlsGrpcServer): [string, string | number][] {
  const b = g.budget;
  const rows: [string, string | number][] = [
    ['rls_grpc_connections', g.connectionCount],
    ['rls_grpc_connections_received', g.acceptedConnections],
    ['rls_grpc_refused_max_connections', g.refusedConnections],
    ['rls_grpc_refused_per_peer', g.refusedPerPeer],
    ['rls_grpc_refused_not_http2', g.notHttp2],
    ['rls_grpc_handshake_timeouts', g.handshakeTimeouts],
    ['rls_grpc_evicted_connections', g.evictedConnections],
    ['rls_grpc_unfinished_bytes', b.held],
    ['rls_grpc_unfinished_bytes_limit', b.processLimit],
    ['rls_grpc_unfinished_bytes_per_connection_limit', b.connectionLimit],
    ['rls_grpc_unfinished_calls', b.waiting.size],
    ['rls_grpc_budget_resets', b.budgetResets],
    ['rls_grpc_message_timeouts', b.timeouts],
  ];
  const t = g.tlsMaterial;
  if (t !== null) {
    rows.push(['rls_grpc_tls_reloads', t.reloads], ['rls_grpc_tls_reload_errors', t.reloadErrors], ['rls_grpc_tls_client_san_refused', g.clientSanRefused]);
    rows.push(['rls_grpc_tls_last_error', t.lastError.replace(/[\r\n]/g, ' ').slice(0, 200)]);
  }
  return rows;
}

function family(name: string, type: 'counter' | 'gauge', help: string, series: [string, number][]): string {
  let out = `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
  for (const [labels, value] of series) out += `${name}${labels} ${value}\n`;
  return out;
}

export function grpcMetricsText(g: RlsGrpcServer): string {
  const b = g.budget;
  let out = family('cellgate_rls_connections', 'gauge', 'gRPC connections open now.', [['', g.connectionCount]]);
  out += family('cellgate_rls_connections_received_total', 'counter', 'gRPC connections accepted.', [['', g.acceptedConnections]]);
  out += family('cellgate_rls_refused_connections_total', 'counter',
    'gRPC connections closed by the server: rls-max-connections were open, the peer had its share (rls-max-connections-per-peer), it did not speak HTTP/2, it did not finish its handshake in time, or maxmemory-clients closed it.', [
      ['{reason="max_connections"}', g.refusedConnections],
      ['{reason="per_peer"}', g.refusedPerPeer],
      ['{reason="not_http2"}', g.notHttp2],
      ['{reason="handshake_timeout"}', g.handshakeTimeouts],
      ['{reason="client_san"}', g.clientSanRefused],
      ['{reason="memory"}', g.evictedConnections],
    ]);
  out += family('cellgate_rls_unfinished_bytes', 'gauge', 'Bytes held in gRPC request messages not yet complete (bounded by rls-max-unfinished-bytes).', [['', b.held]]);
  out += family('cellgate_rls_calls_ended_total', 'counter', 'gRPC calls ended before their message was complete: a byte budget would have been crossed, or rls-message-timeout passed.', [
    ['{reason="budget"}', b.budgetResets],
    ['{reason="message_timeout"}', b.timeouts],
  ]);
  const t = g.tlsMaterial;
  if (t !== null) {
    out += family('cellgate_rls_tls_reloads_total', 'counter', 'New gRPC certificate, key or CA taken without a restart (files changed, CONFIG SET).', [['', t.reloads]]);
    out += family('cellgate_rls_tls_reload_errors_total', 'counter', 'Changed gRPC TLS files not taken (unreadable or broken); the set in force stayed.', [['', t.reloadErrors]]);
  }
  return out;
}
