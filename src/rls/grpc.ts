/**
 * The gRPC door of the rate limit service (docs/envoy.md): `envoy.service.ratelimit.v3.
 * RateLimitService/ShouldRateLimit` and the standard `grpc.health.v1.Health/Check` on `rls-port`
 * of each `rls-bind` address (those of `bind` when empty), plain or TLS (`rls-tls`, with the
 * server's TLS files). The messages are Envoy's published definitions (proto/, loaded at start).
 *
 * Bounds against hostile peers: a request message larger than `rls-max-message-bytes` is refused
 * (RESOURCE_EXHAUSTED) before it is decoded; at most `rls-max-connections` connections are open (a
 * new one beyond it is closed at once); a connection that has sent nothing within
 * FIRST_BYTES_TIMEOUT_MS is closed; each connection has at most MAX_CONCURRENT_STREAMS calls in
 * flight and bounded HTTP/2 session memory; idle connections are closed after MAX_IDLE_MS; Node's
 * HTTP/2 layer closes sessions that flood it with invalid frames, refused streams or unanswered pings.
 */
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Config } from '../config.js';
import { decodeRateLimitRequest, encodeRateLimitResponse } from './codec.js';
import { RlsRequestError, type RateLimitRequest, type RateLimitResponse, type RlsService } from './service.js';

/** Where the vendored .proto files are: proto/ at the package's root. */
export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));
export const RLS_SERVICE_NAME = 'envoy.service.ratelimit.v3.RateLimitService';
export const MAX_CONCURRENT_STREAMS = 100;
export const FIRST_BYTES_TIMEOUT_MS = 10_000;
export const MAX_IDLE_MS = 5 * 60_000;
/** HTTP/2 session memory per connection, in MB (grpc-js's option; the default is 10). */
const MAX_SESSION_MEMORY_MB = 4;

/** What every plain HTTP/2 connection starts with (RFC 9113, 3.4). */
const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: [PROTO_DIR] };

interface Loaded {
  rls: grpc.ServiceDefinition;
  health: grpc.ServiceDefinition;
}

function loadDefinitions(): Loaded {
  const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    envoy: { service: { ratelimit: { v3: { RateLimitService: { service: grpc.ServiceDefinition } } } } };
    grpc: { health: { v1: { Health: { service: grpc.ServiceDefinition } } } };
  };
  const rls = pkg.envoy.service.ratelimit.v3.RateLimitService.service;
  // The schema's path and shape, with cellgate's own (de)serializers of the two messages (codec.ts).
  const method = rls.ShouldRateLimit as grpc.MethodDefinition<RateLimitRequest, RateLimitResponse>;
  const fast: grpc.ServiceDefinition = {
    ...rls,
    ShouldRateLimit: { ...method, requestDeserialize: decodeRateLimitRequest, responseSerialize: encodeRateLimitResponse },
  };
  return { rls: fast, health: pkg.grpc.health.v1.Health.service };
}

const STATUS: Record<RlsRequestError['code'], grpc.status> = {
  UNKNOWN: grpc.status.UNKNOWN,
  INVALID_ARGUMENT: grpc.status.INVALID_ARGUMENT,
  UNAVAILABLE: grpc.status.UNAVAILABLE,
};

/** The server's TLS files as grpc-js credentials (an encrypted key is decrypted with tls-key-file-pass). */
function credentials(config: Config): grpc.ServerCredentials {
  if (!config.bool('rls-tls')) return grpc.ServerCredentials.createInsecure();
  const read = (name: string): Buffer => {
    const file = config.get(name);
    if (file === '') throw new Error(`rls-tls is yes but ${name} is not set`);
    try {
      return readFileSync(file);
    } catch (e) {
      throw new Error(`cannot read ${name} '${file}': ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  };
  const cert = read('tls-cert-file');
  let key = read('tls-key-file');
  const pass = config.get('tls-key-file-pass');
  if (pass !== '') key = Buffer.from(createPrivateKey({ key, passphrase: pass }).export({ type: 'pkcs8', format: 'pem' }) as string);
  const auth = config.get('tls-auth-clients');
  const ca = config.get('tls-ca-cert-file') === '' ? null : read('tls-ca-cert-file');
  if (auth === 'yes' && ca === null) throw new Error('rls-tls with tls-auth-clients yes needs tls-ca-cert-file');
  // grpc-js either requires and verifies a client certificate or asks for none: `optional` is none.
  return grpc.ServerCredentials.createSsl(ca, [{ cert_chain: cert, private_key: key }], auth === 'yes');
}

export interface RlsListenerEvents {
  /** A connection closed because rls-max-connections were open. */
  refused(): void;
  /** Whether the service should say SERVING to health checks. */
  serving(): boolean;
}

/** The gRPC listeners, started and stopped with the server. */
export class RlsGrpcServer {
  private readonly grpcServer: grpc.Server;
  private readonly injector: grpc.ConnectionInjector;
  private readonly listeners: net.Server[] = [];
  private readonly sockets = new Set<net.Socket>();
  readonly maxConnections: number;
  /** Connections closed at once because rls-max-connections were open. */
  refusedConnections = 0;
  /** Connections accepted (refused ones included). */
  acceptedConnections = 0;
  /** Connections closed because they did not open with the HTTP/2 client preface. */
  notHttp2 = 0;
  private readonly tls: boolean;
  port = 0;

  constructor(
    config: Config,
    private readonly service: RlsService,
    private readonly events: RlsListenerEvents,
  ) {
    const defs = loadDefinitions();
    this.maxConnections = config.int('rls-max-connections');
    this.tls = config.bool('rls-tls');
    this.grpcServer = new grpc.Server({
      'grpc.max_receive_message_length': config.int('rls-max-message-bytes'),
      'grpc.max_send_message_length': 4 * 1024 * 1024,
      'grpc.max_concurrent_streams': MAX_CONCURRENT_STREAMS,
      'grpc.max_connection_idle_ms': MAX_IDLE_MS,
      'grpc-node.max_session_memory': MAX_SESSION_MEMORY_MB,
      'grpc.keepalive_time_ms': 2 * 60_000,
      'grpc.keepalive_timeout_ms': 20_000,
    });
    this.grpcServer.addService(defs.rls, {
      ShouldRateLimit: (call: grpc.ServerUnaryCall<RateLimitRequest, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        try {
          this.service.shouldRateLimit(call.request, (error, response) => {
            if (error !== null) callback({ code: STATUS[error.code], details: error.message });
            else callback(null, response);
          });
        } catch (e) {
          // A bug, never the peer's doing: an INTERNAL answer, and the server goes on.
          callback({ code: grpc.status.INTERNAL, details: `internal error: ${(e as Error).message}` });
        }
      },
    });
    this.grpcServer.addService(defs.health, {
      Check: (call: grpc.ServerUnaryCall<{ service: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        const name = call.request.service ?? '';
        if (name !== '' && name !== RLS_SERVICE_NAME) {
          callback({ code: grpc.status.NOT_FOUND, details: `unknown service '${name.slice(0, 128)}'` });
          return;
        }
        callback(null, { status: this.events.serving() ? 'SERVING' : 'NOT_SERVING' });
      },
    });
    this.injector = this.grpcServer.createConnectionInjector(credentials(config));
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
  }

  private accept(socket: net.Socket): void {
    this.acceptedConnections++;
    socket.on('error', () => undefined);
    if (this.sockets.size >= this.maxConnections) {
      this.refusedConnections++;
      this.events.refused();
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    // A peer that connects and says nothing holds a descriptor: it has FIRST_BYTES_TIMEOUT_MS to
    // open its HTTP/2 connection.
    const timer = setTimeout(() => socket.destroy(), FIRST_BYTES_TIMEOUT_MS);
    socket.once('close', () => clearTimeout(timer));
    if (this.tls) {
      // TLS refuses what is not a handshake; the timer ends with the handshake's first bytes.
      const check = setInterval(() => {
        if (socket.bytesRead > 0 || socket.destroyed) {
          clearTimeout(timer);
          clearInterval(check);
        }
      }, 1000);
      socket.once('close', () => clearInterval(check));
      this.injector.injectConnection(socket);
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
      clearTimeout(timer);
      socket.unshift(received);
      this.injector.injectConnection(socket);
    };
    socket.on('data', onData);
  }

  get connections(): number {
    return this.sockets.size;
  }

  /** Stops listening and closes every connection. */
  close(): void {
    for (const l of this.listeners) l.close();
    this.injector.destroy();
    for (const s of this.sockets) s.destroy();
    this.grpcServer.forceShutdown();
  }
}
