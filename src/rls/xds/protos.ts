/**
 * The messages of the xDS subscription (docs/envoy.md, "Configuration over xDS"), from the vendored
 * published definitions: Envoy's aggregated discovery service (proto/envoy/service/discovery/v3/)
 * and the rate limit configuration resource (proto/ratelimit/config/ratelimit/v3/rls_conf.proto,
 * the message envoyproxy/go-control-plane publishes and envoyproxy/ratelimit subscribes to).
 *
 * protobufjs decodes them (the library @grpc/proto-loader is built on): the stream hands over raw
 * bytes, so that a message that does not decode is this client's error to report, not a failure
 * inside grpc-js.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

/** proto/ at the package's root. */
const PROTO_DIR = fileURLToPath(new URL('../../../proto/', import.meta.url));

/** The one gRPC method: a bidirectional stream of DiscoveryRequest → DiscoveryResponse. */
export const ADS_METHOD = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources';
/** The resource type envoyproxy/ratelimit subscribes to (go-control-plane's resource.RateLimitConfigType). */
export const RATE_LIMIT_CONFIG_TYPE = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** google.protobuf.Any as decoded. */
export interface AnyMessage {
  type_url: string;
  value: Buffer;
}

export interface DiscoveryResponse {
  version_info: string;
  resources: AnyMessage[];
  type_url: string;
  nonce: string;
}

export interface DiscoveryRequest {
  version_info: string;
  node: { id: string; metadata: { fields: Record<string, { stringValue: string }> } };
  resource_names: string[];
  type_url: string;
  response_nonce: string;
  error_detail?: { code: number; message: string };
}

/** ratelimit.config.ratelimit.v3.RateLimitDescriptor as decoded (enums as names, absent fields as defaults). */
export interface RateLimitDescriptorMessage {
  key: string;
  value: string;
  rate_limit: { unit: string; requests_per_unit: number; unlimited: boolean; name: string; replaces: { name: string }[] } | null;
  descriptors: RateLimitDescriptorMessage[];
  shadow_mode: boolean;
  detailed_metric: boolean;
  quota_mode: boolean;
  metadata: StructMessage | null;
}

/** google.protobuf.Struct as decoded (one member of the value's oneof is set). */
export interface StructMessage {
  fields: Record<string, StructValue>;
}
export interface StructValue {
  nullValue?: string;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: StructMessage;
  listValue?: { values: StructValue[] };
}

export interface RateLimitConfigMessage {
  name: string;
  domain: string;
  descriptors: RateLimitDescriptorMessage[];
}

interface Types {
  request: protobuf.Type;
  response: protobuf.Type;
  rateLimitConfig: protobuf.Type;
}

let loaded: Types | null = null;

function types(): Types {
  if (loaded !== null) return loaded;
  const root = new protobuf.Root();
  // google/protobuf/*: protobufjs bundles the well-known types, and ships descriptor.proto (which
  // the annotations import) beside them.
  const descriptor = createRequire(import.meta.url).resolve('protobufjs/google/protobuf/descriptor.proto');
  root.resolvePath = (_origin, target) => {
    if (target === 'google/protobuf/descriptor.proto') return descriptor;
    return target.startsWith('google/protobuf/') ? target : PROTO_DIR + target;
  };
  root.loadSync(['envoy/service/discovery/v3/discovery.proto', 'ratelimit/config/ratelimit/v3/rls_conf.proto'], { keepCase: true });
  root.resolveAll();
  loaded = {
    request: root.lookupType('envoy.service.discovery.v3.DiscoveryRequest'),
    response: root.lookupType('envoy.service.discovery.v3.DiscoveryResponse'),
    rateLimitConfig: root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig'),
  };
  return loaded;
}

/** Loads the definitions now (at start: a missing file stops the start, not the first message). */
export function loadXdsProtos(): void {
  types();
}

export function encodeDiscoveryRequest(request: DiscoveryRequest): Buffer {
  const t = types().request;
  return Buffer.from(t.encode(t.fromObject(request)).finish());
}

/** Throws on bytes that are not a DiscoveryResponse (protobufjs's error, a truncated field...). */
export function decodeDiscoveryResponse(bytes: Buffer): DiscoveryResponse {
  const t = types().response;
  const o = t.toObject(t.decode(bytes), { defaults: true, arrays: true }) as { version_info: string; resources: { type_url: string; value: Uint8Array }[]; type_url: string; nonce: string };
  return {
    version_info: o.version_info,
    type_url: o.type_url,
    nonce: o.nonce,
    resources: o.resources.map((r) => ({ type_url: r.type_url ?? '', value: Buffer.from(r.value ?? []) })),
  };
}

/** Throws on bytes that are not a RateLimitConfig. */
export function decodeRateLimitConfig(bytes: Buffer): RateLimitConfigMessage {
  const t = types().rateLimitConfig;
  // Enums as their names (the unit); no field is 64-bit.
  return t.toObject(t.decode(bytes), { defaults: true, arrays: true, enums: String }) as RateLimitConfigMessage;
}
