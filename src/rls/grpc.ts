/**
 * The gRPC door of the rate limit service (docs/envoy.md): `envoy.service.ratelimit.v3.
 * RateLimitService/ShouldRateLimit` and the standard `grpc.health.v1.Health/Check` on `rls-port`
 * of each `rls-bind` address (those of `bind` when empty), plain or TLS (`rls-tls`, grpc-tls.ts).
 *
 * Why a server of our own on node:http2 and not grpc-js's: HTTP/2 stays node:http2's (nghttp2: its
 * framing, HPACK, flow control and flood limits); what is ours is gRPC's small layer on top
 * (grpc-wire.ts: the length prefix, the status trailers) and unary calls only. grpc-js's server
 * buffers each request message inside itself with no way to see or bound the bytes held per
 * stream, so a peer announcing large messages on many streams and never finishing them held
 * memory without bound, outside every account; here each message's bytes are seen as they arrive
 * (grpc-request.ts), counted per connection and per process, and timed. It also gives the
 * handshake its deadline (the peer's SETTINGS, not only its first bytes), the certificate rotation
 * without a restart, and spends less per call (grpc-js's per-call machinery was most of the
 * distance to a bare node:http2 answer). grpc-js remains the client (the xDS client, the tests).
 *
 * Bounds against hostile peers (docs/envoy.md, "Limits against hostile peers"):
 *  - connections: at most `rls-max-connections`, and at most `rls-max-connections-per-peer` from
 *    one remote address, so one peer cannot take the whole cap; a new one beyond either is closed at
 *    once (counted by reason);
 *  - handshake: a connection must open with HTTP/2's preface (plain) or a TLS handshake and then
 *    send its SETTINGS (HTTP/2's first frame, which grpc-go waits for too) within
 *    `rls-handshake-timeout` ms of its accept, or it is closed (counted);
 *  - messages: larger than `rls-max-message-bytes` refused from the prefix; bytes held in
 *    unfinished messages bounded per connection and per process, and each call's message must be
 *    complete within `rls-message-timeout` ms (grpc-request.ts);
 *  - at most MAX_CONCURRENT_STREAMS calls in flight per connection, MAX_SESSION_MEMORY_MB of HTTP/2
 *    session memory, idle connections closed after MAX_IDLE_MS, a keepalive ping every
 *    KEEPALIVE_MS (no answer within KEEPALIVE_TIMEOUT_MS: closed); node:http2 closes sessions that
 *    flood it with invalid frames, refused streams, resets or unanswered pings.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import type { Config } from '../config.js';
import { ClientMemory, type AccountHolder } from '../server/client-memory.js';
import { decodeRateLimitRequest, encodeRateLimitResponse } from './codec.js';
import { MessageBudget, UnaryRequest } from './grpc-request.js';
import { clientSanMatches, RlsTlsMaterial } from './grpc-tls.js';
import { answerError, answerOk, answerOkFramed, decodeHealthCheckRequest, GrpcStatus, HEALTH_NOT_SERVING, HEALTH_SERVING, MESSAGE_HEADER_BYTES, type GrpcCode } from './grpc-wire.js';
import type { RlsRequestError, RlsService } from './service.js';

export const RLS_SERVICE_NAME = 'envoy.service.ratelimit.v3.RateLimitService';
const SHOULD_RATE_LIMIT_PATH = `/${RLS_SERVICE_NAME}/ShouldRateLimit`;
const HEALTH_CHECK_PATH = '/grpc.health.v1.Health/Check';
export const MAX_CONCURRENT_STREAMS = 100;
export const MAX_IDLE_MS = 5 * 60_000;
export const KEEPALIVE_MS = 2 * 60_000;
export const KEEPALIVE_TIMEOUT_MS = 20_000;
/** HTTP/2 session memory per connection, in MB (node:http2's bound on nghttp2's buffers; its default is 10). */
const MAX_SESSION_MEMORY_MB = 4;
/**
 * What a gRPC connection costs before its calls hold anything, counted in its memory account: the
 * socket and the HTTP/2 session on the V8 heap (measured: ~4.9 KB of heap and array buffers per idle
 * connection over 500, Node 20 on x64), plus nghttp2's native state, which V8 does not see (its two
 * 4 KiB HPACK tables and buffers).
 */
export const GRPC_CONNECTION_BASE_BYTES = 12 * 1024;

/** What every plain HTTP/2 connection starts with (RFC 9113, 3.4). */
const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

const STATUS: Record<RlsRequestError['code'], GrpcCode> = {
  UNKNOWN: GrpcStatus.UNKNOWN,
  INVALID_ARGUMENT: GrpcStatus.INVALID_ARGUMENT,
  UNAVAILABLE: GrpcStatus.UNAVAILABLE,
};

/** The server's memory accounts (the clients' sum INFO shows and maxmemory-clients limits). */
export interface RlsAccounts {
  join(holder: AccountHolder): void;
  /** The bytes `holder`'s calls hold now. */
  set(holder: AccountHolder, bytes: number): void;
  release(holder: AccountHolder): void;
}

export interface RlsListenerEvents {
  /** Whether the service should say SERVING to health checks. */
  serving(): boolean;
  notice(message: string): void;
  warning(message: string): void;
}

function ignore(): void {}

/** `::ffff:10.0.0.1` and `10.0.0.1` are one peer. */
function peerOf(address: string | undefined): string {
  if (address === undefined) return '?';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/** One accepted connection: its caps' share, its handshake deadline, its memory account, its session. */
class Connection implements AccountHolder {
  readonly memory = new ClientMemory();
  readonly noEvict = false;
  held = 0;
  session: http2.ServerHttp2Session | null = null;
  handshake: NodeJS.Timeout | null = null;
  /** Calls open now, and since when none has been (the idle bound). */
  streams = 0;
  idleSinceMs = performance.now();
  lastPingMs = performance.now();
  pingSentMs = 0;

  constructor(
    readonly id: number,
    readonly socket: net.Socket,
    readonly peer: string,
    private readonly server: RlsGrpcServer,
  ) {
    this.memory.total = GRPC_CONNECTION_BASE_BYTES;
  }

  /** One of its calls' streams closed. */
  streamClosed(): void {
    if (--this.streams === 0) this.idleSinceMs = performance.now();
  }

  get addr(): string {
    return `${this.socket.remoteAddress ?? '?'}:${this.socket.remotePort ?? 0}`;
  }

  charge(delta: number): void {
    this.held += delta;
    this.server.accounts.set(this, this.held);
  }

  /** maxmemory-clients: this connection held the most; it goes (its calls' bytes with it). */
  evictForMemory(limitBytes: number): void {
    this.server.evictedConnections++;
    this.server.events.warning(`rls gRPC connection ${this.addr} closed: the clients' memory (maxmemory-clients ${limitBytes}) was over its limit and it held the most (${this.memory.total} bytes)`);
    this.destroy();
  }

  destroy(): void {
    this.session?.destroy();
    this.socket.destroy();
  }
}

/** The gRPC listeners, started and stopped with the server. */
export class RlsGrpcServer {
  private readonly h2: http2.Http2Server;
  private tlsEngine: tls.Server | null = null;
  readonly tlsMaterial: RlsTlsMaterial | null = null;
  private readonly listeners: net.Server[] = [];
  private readonly connections = new Set<Connection>();
  /** Open connections per remote address. */
  private readonly peers = new Map<string, number>();
  /** The connection of each session's socket, by its remote address and port (the same through TLS). */
  private readonly bySocket = new Map<string, Connection>();
  private readonly sweep: NodeJS.Timeout;
  private nextId = 1;
  readonly budget: MessageBudget;
  readonly maxConnections: number;
  readonly maxPerPeer: number;
  readonly handshakeTimeoutMs: number;
  /** Connections accepted (refused ones included), and those closed by the server, by reason. */
  acceptedConnections = 0;
  refusedConnections = 0;
  refusedPerPeer = 0;
  notHttp2 = 0;
  handshakeTimeouts = 0;
  evictedConnections = 0;
  clientSanRefused = 0;
  port = 0;

  constructor(
    config: Config,
    private readonly service: RlsService,
    readonly events: RlsListenerEvents,
    readonly accounts: RlsAccounts,
  ) {
    this.maxConnections = config.int('rls-max-connections');
    this.maxPerPeer = config.int('rls-max-connections-per-peer');
    this.handshakeTimeoutMs = config.int('rls-handshake-timeout');
    const maxMessage = config.int('rls-max-message-bytes');
    this.budget = new MessageBudget(config.int('rls-max-unfinished-bytes'), config.int('rls-max-unfinished-bytes-per-connection'), maxMessage, config.int('rls-message-timeout'));
    this.h2 = http2.createServer({
      maxSessionMemory: MAX_SESSION_MEMORY_MB,
      settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS, maxHeaderListSize: 16 * 1024 },
      maxHeaderListPairs: 64,
    });
    this.h2.on('session', (session) => this.onSession(session));
    this.h2.on('sessionError', () => undefined);
    if (config.bool('rls-tls')) {
      const material = new RlsTlsMaterial(config, {
        apply: (options, requireClientCert) => {
          if (this.tlsEngine === null) return;
          this.tlsEngine.setSecureContext(options);
          // Read by the TLS server for each new connection.
          Object.assign(this.tlsEngine, { requestCert: requireClientCert, rejectUnauthorized: requireClientCert });
        },
        notice: (m) => this.events.notice(m),
        warning: (m) => this.events.warning(m),
      });
      this.tlsMaterial = material;
      // A TLS server that listens nowhere: it is handed the sockets this server accepted.
      const engine = tls.createServer({ ...material.options, requestCert: material.requireClientCert, rejectUnauthorized: material.requireClientCert, ALPNProtocols: ['h2'] });
      engine.on('secureConnection', (socket) => this.onSecure(socket));
      engine.on('tlsClientError', () => undefined);
      this.tlsEngine = engine;
    }
    const every = Math.max(10, Math.min(1000, Math.floor(this.budget.timeoutMs / 4)));
    this.sweep = setInterval(() => this.tick(), every);
    this.sweep.unref();
  }

  /**
   * Listens on `addresses` (port `port`; 0 picks one, then the others use it). As `bind`: an address
   * with a leading '-', and ::1, may be unavailable (logged by the caller's start line); a port in
   * use never is.
   */
  async listen(addresses: string[], port: number): Promise<void> {
    for (const raw of addresses) {
      const optional = raw.startsWith('-') || raw === '::1';
      const address = optional ? raw.slice(1) : raw;
      const listener = net.createServer({ noDelay: true }, (socket) => this.accept(socket));
      try {
        await new Promise<void>((resolve, reject) => {
          listener.once('error', reject);
          listener.listen({ host: address, port, ipv6Only: address.includes(':') }, () => {
            listener.off('error', reject);
            resolve();
          });
        });
      } catch (e) {
        if (optional && (e as NodeJS.ErrnoException).code !== 'EADDRINUSE') continue;
        throw new Error(`rls-port: cannot listen on ${address}:${port}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
      }
      listener.on('error', () => undefined);
      port = (listener.address() as net.AddressInfo).port;
      this.listeners.push(listener);
    }
    this.port = port;
    await this.tlsMaterial?.watch();
  }

  private accept(socket: net.Socket): void {
    this.acceptedConnections++;
    socket.on('error', () => undefined);
    if (this.connections.size >= this.maxConnections) {
      this.refusedConnections++;
      socket.destroy();
      return;
    }
    const peer = peerOf(socket.remoteAddress);
    const fromPeer = this.peers.get(peer) ?? 0;
    if (this.maxPerPeer > 0 && fromPeer >= this.maxPerPeer) {
      this.refusedPerPeer++;
      socket.destroy();
      return;
    }
    const conn = new Connection(this.nextId++, socket, peer, this);
    const key = `${socket.remoteAddress}|${socket.remotePort}`;
    this.connections.add(conn);
    this.peers.set(peer, fromPeer + 1);
    this.bySocket.set(key, conn);
    this.accounts.join(conn);
    socket.once('close', () => {
      this.connections.delete(conn);
      const n = (this.peers.get(peer) ?? 1) - 1;
      if (n === 0) this.peers.delete(peer);
      else this.peers.set(peer, n);
      this.bySocket.delete(key);
      if (conn.handshake !== null) clearTimeout(conn.handshake);
      this.accounts.release(conn);
    });
    // Until the peer's SETTINGS arrive (onSession), the connection has a deadline: a peer that
    // connects and stops after its first bytes (the preface, a ClientHello) holds a descriptor.
    conn.handshake = setTimeout(() => {
      this.handshakeTimeouts++;
      conn.destroy();
    }, this.handshakeTimeoutMs);
    if (this.tlsEngine !== null) {
      this.tlsEngine.emit('connection', socket);
      return;
    }
    // Plain HTTP/2 starts with the client preface. Node's HTTP/2 session keeps a connection that
    // sends anything else open, so the preface is checked here, then handed over with the bytes.
    let received: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
      const n = Math.min(received.length, HTTP2_PREFACE.length);
      if (!received.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n))) {
        this.notHttp2++;
        socket.destroy();
        return;
      }
      if (received.length < HTTP2_PREFACE.length) return;
      socket.off('data', onData);
      socket.pause();
      socket.unshift(received);
      this.h2.emit('connection', socket);
    };
    socket.on('data', onData);
  }

  /** A TLS handshake done: the client's name checked, then HTTP/2 (ALPN h2 only). */
  private onSecure(socket: tls.TLSSocket): void {
    socket.on('error', () => undefined);
    if (socket.alpnProtocol !== 'h2') {
      this.notHttp2++;
      socket.destroy();
      return;
    }
    const san = this.tlsMaterial?.san ?? '';
    if (san !== '' && !clientSanMatches(socket, san)) {
      this.clientSanRefused++;
      socket.destroy();
      return;
    }
    this.h2.emit('connection', socket);
  }

  private onSession(session: http2.ServerHttp2Session): void {
    session.on('error', () => undefined);
    const socket = session.socket;
    const conn = this.bySocket.get(`${socket.remoteAddress}|${socket.remotePort}`);
    if (conn === undefined) {
      session.destroy();
      return;
    }
    conn.session = session;
    // The handshake ends with the peer's first SETTINGS (HTTP/2 requires it right after the preface).
    session.once('remoteSettings', () => {
      if (conn.handshake !== null) clearTimeout(conn.handshake);
      conn.handshake = null;
    });
    session.on('stream', (stream, headers) => this.onStream(conn, stream, headers));
  }

  private onStream(conn: Connection, stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    // Listeners with `on`, not `once`: 'end' and 'close' come once per stream anyway, and each `once`
    // wraps its listener in one more closure per call.
    stream.on('error', ignore);
    conn.streams++;
    const contentType = headers['content-type'];
    if (headers[':method'] !== 'POST' || typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      stream.on('close', () => conn.streamClosed());
      // Not gRPC: HTTP's answer, as grpc-go and grpc-js give it.
      if (!stream.destroyed) stream.respond({ ':status': 415 }, { endStream: true });
      stream.close();
      return;
    }
    const path = headers[':path'];
    let handle: (message: Buffer) => void;
    if (path === SHOULD_RATE_LIMIT_PATH) handle = (message) => this.shouldRateLimit(stream, message);
    else if (path === HEALTH_CHECK_PATH) handle = (message) => this.healthCheck(stream, message);
    else {
      stream.on('close', () => conn.streamClosed());
      answerError(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${String(path).slice(0, 256)}`, true);
      return;
    }
    const request = new UnaryRequest(stream, conn, this.budget, handle);
    stream.on('data', (chunk: Buffer) => request.push(chunk));
    stream.on('end', () => request.end());
    stream.on('close', () => {
      conn.streamClosed();
      request.closed();
    });
  }

  private shouldRateLimit(stream: http2.ServerHttp2Stream, message: Buffer): void {
    let request;
    try {
      request = decodeRateLimitRequest(message);
    } catch (e) {
      answerError(stream, GrpcStatus.INTERNAL, `Error deserializing request: ${(e as Error).message}`);
      return;
    }
    try {
      this.service.shouldRateLimit(request, (error, response) => {
        if (error !== null) answerError(stream, STATUS[error.code], error.message);
        else if (response !== null) answerOkFramed(stream, encodeRateLimitResponse(response, MESSAGE_HEADER_BYTES));
      });
    } catch (e) {
      // A bug, never the peer's doing: an INTERNAL answer, and the server goes on.
      answerError(stream, GrpcStatus.INTERNAL, `internal error: ${(e as Error).message}`);
    }
  }

  private healthCheck(stream: http2.ServerHttp2Stream, message: Buffer): void {
    let name: string;
    try {
      name = decodeHealthCheckRequest(message);
    } catch (e) {
      answerError(stream, GrpcStatus.INTERNAL, `Error deserializing request: ${(e as Error).message}`);
      return;
    }
    if (name !== '' && name !== RLS_SERVICE_NAME) {
      answerError(stream, GrpcStatus.NOT_FOUND, `unknown service '${name.slice(0, 128)}'`);
      return;
    }
    answerOk(stream, this.events.serving() ? HEALTH_SERVING : HEALTH_NOT_SERVING);
  }

  /** The periodic look: late messages, idle connections, keepalive pings. */
  private tick(): void {
    const now = performance.now();
    this.budget.expire(now);
    for (const conn of this.connections) {
      const session = conn.session;
      if (session === null || session.destroyed) continue;
      if (conn.streams === 0 && now - conn.idleSinceMs >= MAX_IDLE_MS) {
        // GOAWAY: the peer (Envoy) opens a new connection when it next needs one.
        session.close();
        continue;
      }
      if (conn.pingSentMs !== 0) {
        if (now - conn.pingSentMs >= KEEPALIVE_TIMEOUT_MS) conn.destroy();
      } else if (now - conn.lastPingMs >= KEEPALIVE_MS) {
        conn.pingSentMs = now;
        const sent = session.ping((error) => {
          conn.pingSentMs = 0;
          conn.lastPingMs = performance.now();
          if (error !== null) conn.destroy();
        });
        if (!sent) conn.pingSentMs = 0;
      }
    }
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  /** Stops listening and closes every connection. */
  close(): void {
    clearInterval(this.sweep);
    for (const l of this.listeners) l.close();
    for (const c of this.connections) c.destroy();
    this.tlsMaterial?.close();
    this.h2.close();
  }
}
