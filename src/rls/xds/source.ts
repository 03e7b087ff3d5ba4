/**
 * The rate limit configuration from an xDS management server (`rls-xds-server`, docs/envoy.md,
 * "Configuration over xDS"): the settings read once, the TLS material (credentials.ts), the
 * subscription (client.ts), and what they show: INFO's rls_xds_* fields, the cellgate_rls_xds_*
 * metrics, the reason /readyz gives while nothing has arrived.
 *
 * The configuration a response makes is handed over through `install`, the same value the file
 * loader makes: the service never learns where its configuration came from.
 */
import type * as grpc from '@grpc/grpc-js';
import { credentials as grpcCredentials } from '@grpc/grpc-js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import type { RlsConfig } from '../config.js';
import { parseNodeMetadata, XdsClient, type XdsClientSettings } from './client.js';
import { XdsCredentials } from './credentials.js';
import { loadXdsProtos } from './protos.js';
import { validateResources } from './validation.js';

export interface XdsSourceHost {
  readonly log: Logger;
  readonly tasks: { failed(name: string, e: unknown): void };
  /** Puts a configuration in force (the file loader's path into the service). */
  install(config: RlsConfig, from: string): void;
  /** A configuration was refused (counted as a refused load). */
  refused(): void;
}

export class XdsSource {
  readonly client: XdsClient;
  readonly tls: XdsCredentials | null;
  readonly settings: XdsClientSettings;

  /** Reads the settings and the TLS files; throws an Error naming the setting when they cannot be used. */
  constructor(
    config: Config,
    private readonly host: XdsSourceHost,
  ) {
    loadXdsProtos();
    this.settings = {
      server: config.get('rls-xds-server').trim(),
      nodeId: config.get('rls-xds-node-id'),
      nodeMetadata: parseNodeMetadata(config.get('rls-xds-node-metadata')),
      retryMs: config.int('rls-xds-retry-ms'),
      maxMessageBytes: config.int('rls-xds-max-message-bytes'),
      firstResponseMs: config.int('rls-xds-first-response-ms'),
      tlsServerName: config.bool('rls-xds-tls') ? config.get('rls-xds-tls-server-name') : '',
    };
    const log = host.log;
    if (!config.bool('rls-xds-tls')) {
      for (const name of ['rls-xds-tls-cert-file', 'rls-xds-tls-key-file', 'rls-xds-tls-ca-cert-file', 'rls-xds-tls-server-name']) {
        if (config.get(name) !== '') log.warning(`${name} is set but rls-xds-tls is no: the xDS server is reached without TLS`, { setting: name });
      }
    }
    this.tls = config.bool('rls-xds-tls')
      ? new XdsCredentials(
          { certFile: config.get('rls-xds-tls-cert-file'), keyFile: config.get('rls-xds-tls-key-file'), caFile: config.get('rls-xds-tls-ca-cert-file') },
          {
            rotated: () => this.client.restart('new client credentials'),
            warning: (message) => log.warning(message),
            notice: (message) => log.notice(message),
          },
        )
      : null;
    const insecure = grpcCredentials.createInsecure();
    this.client = new XdsClient(this.settings, {
      validate: (resources) => validateResources(resources).catch((e: unknown) => {
        host.refused();
        throw e;
      }),
      install: (config, version) => host.install(config, `xDS version '${version}' from ${this.settings.server}`),
      credentials: (): grpc.ChannelCredentials => this.tls?.credentials ?? insecure,
      log,
      failed: (name, e) => host.tasks.failed(name, e),
    });
  }

  async start(): Promise<void> {
    this.host.log.notice(`rls-xds: subscribing to ${this.settings.server} as node '${this.settings.nodeId}'${this.tls !== null ? ' over TLS' : ''}`, {
      xds_server: this.settings.server, node_id: this.settings.nodeId, node_metadata: this.settings.nodeMetadata,
    });
    await this.tls?.watch();
    this.client.start();
  }

  close(): void {
    this.client.close();
    this.tls?.close();
  }

  /** Why nothing is in force yet (for /readyz), the client's state in words. */
  waitingReason(): string {
    const st = this.client.status;
    const last = st.lastNackReason !== '' ? `; last refused: ${st.lastNackReason}` : st.lastError !== '' ? `; last error: ${st.lastError}` : '';
    return `no rate limit configuration received yet from the xDS server ${this.settings.server} (${st.state}${last})`;
  }

  /** INFO's fields (the rls section). */
  infoRows(): [string, string | number][] {
    const st = this.client.status;
    const oneLine = (s: string): string => s.replace(/[\r\n]+/g, ' ');
    return [
      ['rls_xds_server', this.settings.server],
      ['rls_xds_node_id', this.settings.nodeId],
      ['rls_xds_tls', this.tls !== null ? 1 : 0],
      ['rls_xds_state', st.state],
      ['rls_xds_connected', st.connected ? 1 : 0],
      ['rls_xds_streams', st.streams],
      ['rls_xds_reconnects', st.reconnects],
      ['rls_xds_responses', st.responses],
      ['rls_xds_acks', st.acks],
      ['rls_xds_nacks', st.nacks],
      ['rls_xds_superseded', st.superseded],
      ['rls_xds_acked_version', oneLine(st.ackedVersion)],
      ['rls_xds_acked_at_ms', st.ackedAtMs],
      ['rls_xds_last_nack_version', oneLine(st.lastNackVersion)],
      ['rls_xds_last_nack_reason', oneLine(st.lastNackReason)],
      ['rls_xds_stream_failures', st.streamFailures],
      ['rls_xds_first_response_timeouts', st.firstResponseTimeouts],
      ['rls_xds_consecutive_failures', st.consecutiveFailures],
      ['rls_xds_backoff_ms', st.backoffMs],
      ['rls_xds_last_error', oneLine(st.lastError)],
      ['rls_xds_tls_reloads', this.tls?.reloads ?? 0],
      ['rls_xds_tls_reload_errors', this.tls?.reloadErrors ?? 0],
      ['rls_xds_tls_last_error', oneLine(this.tls?.lastError ?? '')],
    ];
  }

  /** The cellgate_rls_xds_* families in the Prometheus text format. */
  metricsText(): string {
    const st = this.client.status;
    const esc = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
    const one = (name: string, type: 'gauge' | 'counter', help: string, value: number): string => `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${value}\n`;
    return [
      one('cellgate_rls_xds_connected', 'gauge', 'Whether the connection to the xDS server is up.', st.connected ? 1 : 0),
      one('cellgate_rls_xds_reconnects_total', 'counter', 'Streams to the xDS server opened again after the first.', st.reconnects),
      one('cellgate_rls_xds_stream_failures_total', 'counter', 'Streams to the xDS server that broke (refused, ended, no first response, a message over the bound or not decoding).', st.streamFailures),
      `# HELP cellgate_rls_xds_responses_total Responses of the xDS server, by what was answered.\n# TYPE cellgate_rls_xds_responses_total counter\n`
        + `cellgate_rls_xds_responses_total{result="ack"} ${st.acks}\ncellgate_rls_xds_responses_total{result="nack"} ${st.nacks}\n`,
      `# HELP cellgate_rls_xds_acked_version The version of the configuration in force (ACKed), as a label.\n# TYPE cellgate_rls_xds_acked_version gauge\n`
        + (st.acks > 0 ? `cellgate_rls_xds_acked_version{version="${esc(st.ackedVersion)}"} 1\n` : ''),
      one('cellgate_rls_xds_backoff_seconds', 'gauge', 'The wait before the next attempt, doubled per break in a row.', st.backoffMs / 1000),
      `# HELP cellgate_rls_xds_tls_reloads_total Client certificate, key or CA changes, by outcome (a refused one leaves the set in force).\n# TYPE cellgate_rls_xds_tls_reloads_total counter\n`
        + `cellgate_rls_xds_tls_reloads_total{result="ok"} ${this.tls?.reloads ?? 0}\ncellgate_rls_xds_tls_reloads_total{result="refused"} ${this.tls?.reloadErrors ?? 0}\n`,
    ].join('');
  }
}
