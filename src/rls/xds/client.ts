/**
 * The xDS subscription of the rate limit service (docs/envoy.md, "Configuration over xDS"): one
 * state-of-the-world stream of Envoy's aggregated discovery service, as envoyproxy/ratelimit's
 * client (go-control-plane's sotw.ADSClient) makes it —
 *  - every request carries the node (id and metadata) and the type URL of RateLimitConfig, with no
 *    resource names (all of them);
 *  - a response is applied whole (the state of the world: its resources are the configuration) and
 *    ACKed with its version and nonce; one that fails validation is NACKed with the version in force,
 *    its nonce and an error_detail naming the problem, and the configuration in force stays;
 *  - a new stream starts with the version in force (the server need not send it again).
 *
 * What a hostile or broken server can do is bounded here: a message over rls-xds-max-message-bytes
 * ends the stream (grpc-js refuses it before decoding); a message that does not decode ends it too
 * (its nonce cannot be read to NACK it); resources are bounded in resources.ts; a stream that sends
 * nothing within rls-xds-first-response-ms is logged and opened again; streams that break soon
 * after they open (a flapping server) reconnect after a doubling delay; responses are validated one
 * at a time off the event loop (validation.ts), and of those that arrive meanwhile only the newest
 * is kept (each is the whole state: at most two responses are held). Nothing a server
 * sends ends the process: every outcome is a state in XdsStatus (INFO, metrics, /readyz, the log).
 */
import * as grpc from '@grpc/grpc-js';
import { RlsConfigError, type RlsConfig } from '../config.js';
import { ADS_METHOD, decodeDiscoveryResponse, encodeDiscoveryRequest, RATE_LIMIT_CONFIG_TYPE, type AnyMessage, type DiscoveryRequest, type DiscoveryResponse } from './protos.js';
import { XdsResourceError } from './resources.js';

/** A stream that lasted this long was healthy: the next break reconnects after rls-xds-retry-ms again. */
export const STABLE_STREAM_MS = 30_000;
/** The longest wait between attempts (envoyproxy/ratelimit's XDS_CLIENT_BACKOFF_MAX_INTERVAL), unless rls-xds-retry-ms is longer. */
export const MAX_BACKOFF_MS = 60_000;
/** error_detail's code in a NACK: the resource is invalid. */
const INVALID_ARGUMENT = 3;

export interface XdsClientSettings {
  /** host:port. */
  server: string;
  nodeId: string;
  nodeMetadata: Record<string, string>;
  retryMs: number;
  maxMessageBytes: number;
  firstResponseMs: number;
  /** The name the server's certificate must carry ('' = the host of `server`). */
  tlsServerName: string;
}

export type XdsState = 'connecting' | 'connected' | 'waiting' | 'closed';

/** What the client has seen, for INFO, the metrics, /readyz and the log. */
export class XdsStatus {
  state: XdsState = 'connecting';
  /** The channel reached READY on the current stream. */
  connected = false;
  streams = 0;
  responses = 0;
  acks = 0;
  nacks = 0;
  ackedVersion = '';
  ackedAtMs = 0;
  lastNackVersion = '';
  lastNackReason = '';
  /** Why the last stream ended. */
  lastError = '';
  streamFailures = 0;
  firstResponseTimeouts = 0;
  /** Responses left unanswered because a newer one arrived while an older one was validated. */
  superseded = 0;
  /** Breaks in a row (reset by a stream that lasted STABLE_STREAM_MS) and the wait they set. */
  consecutiveFailures = 0;
  backoffMs = 0;

  /** Streams opened after the first. */
  get reconnects(): number {
    return Math.max(0, this.streams - 1);
  }
}

export interface XdsClientHandlers {
  /** The configuration the response's resources make; rejects with XdsResourceError or RlsConfigError (the NACK's reason). */
  validate(resources: AnyMessage[]): Promise<RlsConfig>;
  /** Puts it in force (it is then ACKed). */
  install(config: RlsConfig, version: string): void;
  credentials(): grpc.ChannelCredentials;
  log: { notice(msg: string, fields?: Record<string, unknown>): void; warning(msg: string, fields?: Record<string, unknown>): void };
  /** An unexpected exception (a bug): logged and counted by the server's task guard. */
  failed(name: string, e: unknown): void;
}

/**
 * envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA: pairs separated by commas, each split at its
 * first `=`; a pair without `=` is ignored, values are strings.
 */
export function parseNodeMetadata(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of text.split(',')) {
    const eq = entry.indexOf('=');
    if (eq >= 0) out[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return out;
}

interface Stream {
  /** Events of an older stream are ignored. */
  generation: number;
  client: grpc.Client;
  call: grpc.ClientDuplexStream<Buffer, Buffer>;
  startedMs: number;
  answered: boolean;
  /** Why the client itself ended it (a deadline, a message that does not decode, new credentials). */
  endReason: string | null;
  firstResponseTimer: NodeJS.Timeout | null;
  /** A response is being validated; `pending` is the newest that arrived meanwhile. */
  validating: boolean;
  pending: DiscoveryResponse | null;
}

export class XdsClient {
  readonly status = new XdsStatus();
  private stream: Stream | null = null;
  private generation = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly node: DiscoveryRequest['node'];

  constructor(
    private readonly settings: XdsClientSettings,
    private readonly handlers: XdsClientHandlers,
  ) {
    const fields: Record<string, { stringValue: string }> = {};
    for (const [k, v] of Object.entries(settings.nodeMetadata)) fields[k] = { stringValue: v };
    this.node = { id: settings.nodeId, metadata: { fields } };
  }

  start(): void {
    this.connect();
  }

  /** Ends the stream in force and opens a new one now (new client credentials); not a failure. */
  restart(why: string): void {
    if (this.closed) return;
    if (this.retryTimer !== null) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    if (this.stream !== null) this.drop(this.stream, why);
    this.status.consecutiveFailures = 0;
    this.connect();
  }

  close(): void {
    this.closed = true;
    this.status.state = 'closed';
    this.status.connected = false;
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    if (this.stream !== null) this.drop(this.stream, 'closed');
  }

  private connect(): void {
    this.retryTimer = null;
    const s = this.settings;
    const options: grpc.ChannelOptions = { 'grpc.max_receive_message_length': s.maxMessageBytes };
    if (s.tlsServerName !== '') options['grpc.ssl_target_name_override'] = s.tlsServerName;
    const client = new grpc.Client(s.server, this.handlers.credentials(), options);
    const call = client.makeBidiStreamRequest(ADS_METHOD, (b: Buffer) => b, (b: Buffer) => b);
    const stream: Stream = { generation: ++this.generation, client, call, startedMs: Date.now(), answered: false, endReason: null, firstResponseTimer: null, validating: false, pending: null };
    this.stream = stream;
    this.status.streams++;
    this.status.state = 'connecting';
    this.status.connected = false;
    call.on('data', (bytes: Buffer) => this.guard(stream, () => this.onResponse(stream, bytes)));
    // 'status' reports every end; 'error' (non-OK ends) needs a listener, or it would be thrown.
    call.on('error', () => undefined);
    call.on('status', (st: grpc.StatusObject) => this.guard(stream, () => this.onEnd(stream, st)));
    stream.firstResponseTimer = setTimeout(() => this.guard(stream, () => this.noFirstResponse(stream)), s.firstResponseMs);
    stream.firstResponseTimer.unref();
    this.watchReady(stream);
    this.send(stream, { version_info: this.status.ackedVersion, response_nonce: '' });
  }

  /** Runs a stream's event if the stream is still the current one; a throw is a bug, logged. */
  private guard(stream: Stream, event: () => void): void {
    if (stream.generation !== this.generation || this.closed) return;
    try {
      event();
    } catch (e) {
      this.handlers.failed('xDS client', e);
    }
  }

  private watchReady(stream: Stream): void {
    const channel = stream.client.getChannel();
    const look = (): void => {
      if (stream.generation !== this.generation || this.closed) return;
      const state = channel.getConnectivityState(true);
      if (state === grpc.connectivityState.READY) {
        this.status.connected = true;
        this.status.state = 'connected';
        this.handlers.log.notice(`xDS: connected to ${this.settings.server}, subscribed to RateLimitConfig as node '${this.settings.nodeId}'`, { xds_server: this.settings.server, node_id: this.settings.nodeId });
        return;
      }
      if (state === grpc.connectivityState.SHUTDOWN) return;
      channel.watchConnectivityState(state, Infinity, look);
    };
    look();
  }

  private send(stream: Stream, fields: { version_info: string; response_nonce: string; error_detail?: { code: number; message: string } }): void {
    stream.call.write(encodeDiscoveryRequest({ node: this.node, type_url: RATE_LIMIT_CONFIG_TYPE, resource_names: [], ...fields }));
  }

  private onResponse(stream: Stream, bytes: Buffer): void {
    if (stream.firstResponseTimer !== null) {
      clearTimeout(stream.firstResponseTimer);
      stream.firstResponseTimer = null;
    }
    stream.answered = true;
    this.status.responses++;
    let response;
    try {
      response = decodeDiscoveryResponse(bytes);
    } catch (e) {
      this.drop(stream, `a response that does not decode as a DiscoveryResponse (${(e as Error).message})`);
      this.scheduleRetry(stream);
      return;
    }
    if (stream.validating) {
      // The state of the world: a newer response makes the one waiting behind the validation moot.
      if (stream.pending !== null) this.status.superseded++;
      stream.pending = response;
      return;
    }
    this.handle(stream, response);
  }

  /** Validates one response and answers it (ACK or NACK); the one that came meanwhile, if any, next. */
  private handle(stream: Stream, response: DiscoveryResponse): void {
    const version = response.version_info;
    if (response.type_url !== RATE_LIMIT_CONFIG_TYPE) {
      this.nack(stream, version, response.nonce, `type_url "${response.type_url}" was not subscribed to (only "${RATE_LIMIT_CONFIG_TYPE}")`);
      return;
    }
    stream.validating = true;
    this.handlers.validate(response.resources).then(
      (config) => this.guard(stream, () => {
        this.handlers.install(config, version);
        const st = this.status;
        st.acks++;
        st.ackedVersion = version;
        st.ackedAtMs = Date.now();
        this.send(stream, { version_info: version, response_nonce: response.nonce });
      }),
      (e: unknown) => this.guard(stream, () => {
        if (e instanceof XdsResourceError || e instanceof RlsConfigError) this.nack(stream, version, response.nonce, e.message);
        else {
          this.handlers.failed('xDS configuration', e);
          this.nack(stream, version, response.nonce, `internal error: ${(e as Error).message}`);
        }
      }),
    ).finally(() => this.guard(stream, () => {
      stream.validating = false;
      const next = stream.pending;
      stream.pending = null;
      if (next !== null) this.handle(stream, next);
    }));
  }

  /** Refuses a response: the version in force, its nonce, the reason; the configuration in force stays. */
  private nack(stream: Stream, version: string, nonce: string, reason: string): void {
    const st = this.status;
    st.nacks++;
    st.lastNackVersion = version;
    st.lastNackReason = reason;
    this.send(stream, { version_info: st.ackedVersion, response_nonce: nonce, error_detail: { code: INVALID_ARGUMENT, message: reason } });
    this.handlers.log.warning(`xDS: configuration version '${version}' refused (NACK): ${reason}; ${st.acks > 0 ? `version '${st.ackedVersion}' stays in force` : 'no configuration is in force yet'}`, {
      xds_server: this.settings.server, version, nonce, error: reason,
    });
  }

  private noFirstResponse(stream: Stream): void {
    stream.firstResponseTimer = null;
    if (stream.answered) return;
    this.status.firstResponseTimeouts++;
    this.handlers.log.warning(`xDS: ${this.settings.server} sent no response within ${this.settings.firstResponseMs} ms of the subscription (node '${this.settings.nodeId}'); does it hold a configuration for this node? Opening the stream again`, {
      xds_server: this.settings.server, node_id: this.settings.nodeId,
    });
    this.drop(stream, `no response within ${this.settings.firstResponseMs} ms (rls-xds-first-response-ms)`);
    this.scheduleRetry(stream);
  }

  private onEnd(stream: Stream, st: grpc.StatusObject): void {
    const why = `${grpc.status[st.code] ?? st.code}: ${st.details || 'the stream ended'}`;
    this.drop(stream, why);
    this.scheduleRetry(stream);
  }

  /** Ends a stream for good: its later events are ignored. */
  private drop(stream: Stream, why: string): void {
    if (stream.firstResponseTimer !== null) clearTimeout(stream.firstResponseTimer);
    stream.endReason ??= why;
    if (this.stream === stream) {
      this.stream = null;
      this.generation++;
    }
    this.status.connected = false;
    stream.call.cancel();
    stream.client.close();
  }

  /** After a break: the next attempt after rls-xds-retry-ms, doubled per break in a row. */
  private scheduleRetry(stream: Stream): void {
    if (this.closed) return;
    const st = this.status;
    const livedMs = Date.now() - stream.startedMs;
    st.consecutiveFailures = livedMs >= STABLE_STREAM_MS ? 1 : st.consecutiveFailures + 1;
    st.streamFailures++;
    st.lastError = stream.endReason ?? 'the stream ended';
    const cap = Math.max(MAX_BACKOFF_MS, this.settings.retryMs);
    st.backoffMs = Math.min(cap, this.settings.retryMs * 2 ** Math.min(st.consecutiveFailures - 1, 30));
    // ±25%: many instances that lost the same server do not come back at the same instant.
    const delayMs = Math.round(st.backoffMs * (0.75 + Math.random() * 0.5));
    st.state = 'waiting';
    this.handlers.log.warning(`xDS: the stream to ${this.settings.server} ended (${st.lastError}); reconnecting in ${delayMs} ms`, {
      xds_server: this.settings.server, error: st.lastError, retry_ms: delayMs, consecutive_failures: st.consecutiveFailures,
    });
    this.retryTimer = setTimeout(() => {
      if (!this.closed) this.connect();
    }, delayMs);
    this.retryTimer.unref();
  }
}
