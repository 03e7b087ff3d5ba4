/**
 * An xDS management server for the tests, on loopback: grpc-js's server with the aggregated
 * discovery service loaded from Envoy's published definitions (proto/envoy/service/discovery/v3/,
 * @grpc/proto-loader), the RateLimitConfig resources encoded by protobufjs from
 * proto/ratelimit/config/ratelimit/v3/rls_conf.proto — none of cellgate's own code.
 *
 * It serves the state of the world as go-control-plane's snapshot cache does: the current snapshot
 * (version + resources) to each stream whose last request did not carry that version, a new nonce
 * per response. It records every request, and can misbehave on demand (stay silent, end each
 * stream at once, send raw bytes).
 */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import { PROTO_DIR } from './helpers.js';

const def = protoLoader.loadSync(['envoy/service/discovery/v3/ads.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const adsDef = def['envoy.service.discovery.v3.AggregatedDiscoveryService'] as grpc.ServiceDefinition;
const method = adsDef.StreamAggregatedResources as grpc.MethodDefinition<unknown, unknown>;

const root = new protobuf.Root();
root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : PROTO_DIR + target);
root.loadSync(['ratelimit/config/ratelimit/v3/rls_conf.proto'], { keepCase: true });
const RateLimitConfig = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');

export const TYPE_URL = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** A RateLimitConfig as protobufjs's fromObject takes it (field names as in the .proto). */
export type RateLimitConfigObject = Record<string, unknown>;

/** One resource: the Any wrapping an encoded RateLimitConfig. */
export function resource(config: RateLimitConfigObject, typeUrl = TYPE_URL): { type_url: string; value: Buffer } {
  return { type_url: typeUrl, value: Buffer.from(RateLimitConfig.encode(RateLimitConfig.fromObject(config)).finish()) };
}

/** A DiscoveryResponse's bytes as the published definition encodes it (for tests that tamper with them). */
export function encodeResponse(response: Record<string, unknown>): Buffer {
  return method.responseSerialize(response);
}

export interface RecordedRequest {
  stream: number;
  version_info: string;
  response_nonce: string;
  type_url: string;
  resource_names: string[];
  node: { id: string; metadata: { fields: Record<string, { stringValue?: string }> } | null } | null;
  error_detail: { code: number; message: string } | null;
}

export type Mode = 'serve' | 'silent' | 'hangup';

interface Stream {
  id: number;
  call: grpc.ServerDuplexStream<unknown, unknown>;
  lastVersion: string | null;
}

export interface TlsFiles {
  cert: string;
  key: string;
  /** When given, client certificates signed by it are required. */
  ca?: string;
}

export class XdsTestServer {
  port = 0;
  readonly requests: RecordedRequest[] = [];
  /** Streams opened so far (also those ended). */
  streamsOpened = 0;
  mode: Mode = 'serve';
  private server: grpc.Server | null = null;
  private streams = new Set<Stream>();
  private snapshot: { version: string; resources: { type_url: string; value: Buffer }[] } | null = null;
  private nonce = 0;

  constructor(private readonly tls: TlsFiles | null = null) {}

  /** Listens on loopback (on `port` when given: a restart keeps the address). */
  async start(port = 0): Promise<void> {
    const server = new grpc.Server();
    // The published definition's codecs, with one hatch: a Buffer is sent as it is (hostile tests).
    const service: grpc.ServiceDefinition = {
      StreamAggregatedResources: { ...method, responseSerialize: (v: unknown) => (Buffer.isBuffer(v) ? v : method.responseSerialize(v)) },
    };
    server.addService(service, { StreamAggregatedResources: (call: grpc.ServerDuplexStream<unknown, unknown>) => this.onStream(call) });
    const creds = this.tls === null
      ? grpc.ServerCredentials.createInsecure()
      : grpc.ServerCredentials.createSsl(this.tls.ca === undefined ? null : readFileSync(this.tls.ca), [{ private_key: readFileSync(this.tls.key), cert_chain: readFileSync(this.tls.cert) }], this.tls.ca !== undefined);
    this.port = await new Promise<number>((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, creds, (e, p) => (e ? reject(e) : resolve(p))));
    this.server = server;
  }

  /** Ends every stream and closes the port at once. */
  stop(): void {
    for (const s of this.streams) s.call.destroy();
    this.streams.clear();
    this.server?.forceShutdown();
    this.server = null;
  }

  /** Sets the state of the world and sends it to every stream that does not have it. */
  push(version: string, resources: { type_url: string; value: Buffer }[]): void {
    this.snapshot = { version, resources };
    for (const s of this.streams) this.sendSnapshot(s);
  }

  /** Writes raw bytes as one response message on every open stream. */
  sendRaw(bytes: Buffer): void {
    for (const s of this.streams) s.call.write(bytes);
  }

  /** A response with any fields, to every open stream; the test takes over from the snapshot (cleared). */
  sendResponse(fields: Record<string, unknown>): string {
    this.snapshot = null;
    const nonce = `n${++this.nonce}`;
    for (const s of this.streams) s.call.write({ type_url: TYPE_URL, nonce, ...fields });
    return nonce;
  }

  get openStreams(): number {
    return this.streams.size;
  }

  /** The requests that answered the response of `nonce` (ACK or NACK). */
  answersTo(nonce: string): RecordedRequest[] {
    return this.requests.filter((r) => r.response_nonce === nonce);
  }

  private onStream(call: grpc.ServerDuplexStream<unknown, unknown>): void {
    const stream: Stream = { id: ++this.streamsOpened, call, lastVersion: null };
    if (this.mode === 'hangup') {
      call.end();
      return;
    }
    this.streams.add(stream);
    call.on('data', (req: Omit<RecordedRequest, 'stream'>) => {
      this.requests.push({ ...req, stream: stream.id });
      stream.lastVersion = req.version_info;
      if (this.mode === 'serve' && req.error_detail === null) this.sendSnapshot(stream);
    });
    call.on('error', () => this.streams.delete(stream));
    call.on('end', () => {
      this.streams.delete(stream);
      call.end();
    });
    call.on('cancelled', () => this.streams.delete(stream));
  }

  private sendSnapshot(s: Stream): void {
    if (this.mode !== 'serve' || this.snapshot === null || s.lastVersion === this.snapshot.version) return;
    s.lastVersion = this.snapshot.version;
    s.call.write({ version_info: this.snapshot.version, resources: this.snapshot.resources, type_url: TYPE_URL, nonce: `n${++this.nonce}` });
  }

  /** The nonce the last response got. */
  get lastNonce(): string {
    return `n${this.nonce}`;
  }
}
