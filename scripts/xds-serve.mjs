#!/usr/bin/env node
// xds-serve.mjs — a small xDS management server for trying cellgate's (or envoyproxy/ratelimit's)
// CONFIG_TYPE=GRPC_XDS_SOTW by hand, as Envoy Gateway's controller feeds its rate limit Deployment:
// the aggregated discovery service (state of the world) from Envoy's published definitions in proto/
// (@grpc/grpc-js, @grpc/proto-loader), serving one snapshot — one RateLimitConfig resource per YAML
// file given, each file in envoyproxy/ratelimit's format (domain, descriptors) — to every node.
// scripts/ratelimit-image-check.sh runs the image against it.
//
//   node scripts/xds-serve.mjs [--bind 127.0.0.1] [--port 18001] [--version v1] \
//     [--cert server.crt --key server.key [--ca ca.crt]] limits.yaml...
//
// With --cert/--key it serves TLS; with --ca too, a client certificate signed by it is required (as
// Envoy Gateway's xDS server requires the rate limit pod's). It prints `listening on <host>:<port>`
// once bound, then one line per request (`ACK v1 node=...`, `NACK ... <reason>`, `request node=...`),
// and exits 0 on SIGTERM or SIGINT. It never changes the snapshot: restart it with other files.
import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import { parse } from 'yaml';

export const TYPE_URL = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';
const PROTO_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'proto') + '/';

// The resource's message, encoded by protobufjs from the published rls_conf.proto (google/protobuf/*
// from protobufjs's own copies, as proto-loader does).
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : PROTO_DIR + target);
root.loadSync(['ratelimit/config/ratelimit/v3/rls_conf.proto'], { keepCase: true });
const RateLimitConfig = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');
const UNITS = root.lookupEnum('ratelimit.config.ratelimit.v3.RateLimitUnit').values;

const DESCRIPTOR_FIELDS = new Set(['key', 'value', 'rate_limit', 'descriptors', 'shadow_mode', 'detailed_metric', 'quota_mode']);
const POLICY_FIELDS = new Set(['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces']);

function descriptorMessage(d, where) {
  if (d === null || typeof d !== 'object' || Array.isArray(d)) throw new Error(`${where}: not a mapping`);
  for (const k of Object.keys(d)) if (!DESCRIPTOR_FIELDS.has(k)) throw new Error(`${where}: "${k}" has no field in RateLimitDescriptor`);
  const out = { ...d };
  if (d.rate_limit !== undefined) {
    for (const k of Object.keys(d.rate_limit)) if (!POLICY_FIELDS.has(k)) throw new Error(`${where}.rate_limit: "${k}" has no field in RateLimitPolicy`);
    // The YAML's units are lower case (minute); the message's enum names are upper case (MINUTE).
    const unit = d.rate_limit.unit === undefined ? undefined : String(d.rate_limit.unit).toUpperCase();
    if (unit !== undefined && !(unit in UNITS)) throw new Error(`${where}.rate_limit: unit "${d.rate_limit.unit}" is not a RateLimitUnit`);
    const n = d.rate_limit.requests_per_unit;
    if (n !== undefined && !(Number.isInteger(n) && n >= 0 && n <= 0xffffffff)) throw new Error(`${where}.rate_limit: requests_per_unit ${JSON.stringify(n)} is not a uint32`);
    out.rate_limit = { ...d.rate_limit, ...(unit === undefined ? {} : { unit }) };
  }
  if (d.descriptors !== undefined) out.descriptors = d.descriptors.map((c, i) => descriptorMessage(c, `${where}.descriptors[${i}]`));
  return out;
}

/** One YAML document of envoyproxy/ratelimit's format → the RateLimitConfig as a plain object. */
export function configMessage(name, document) {
  if (document === null || typeof document !== 'object' || typeof document.domain !== 'string') throw new Error(`${name}: no domain`);
  return { name, domain: document.domain, descriptors: (document.descriptors ?? []).map((d, i) => descriptorMessage(d, `${name}: descriptors[${i}]`)) };
}

/** The Any a DiscoveryResponse carries for one YAML text: the RateLimitConfig encoded. */
export function resourceFromYaml(name, text) {
  const message = RateLimitConfig.fromObject(configMessage(name, parse(text)));
  // fromObject converts what it can; verify then names a value of the wrong type (a string count...).
  const problem = RateLimitConfig.verify(message);
  if (problem !== null) throw new Error(`${name}: ${problem}`);
  return { type_url: TYPE_URL, value: Buffer.from(RateLimitConfig.encode(message).finish()) };
}

/** Decodes a resource's value back (for checks): the message as a plain object, enums as names. */
export function decodeResource(value) {
  return RateLimitConfig.toObject(RateLimitConfig.decode(value), { enums: String, defaults: false });
}

function serve(options, resources) {
  const def = protoLoader.loadSync(['envoy/service/discovery/v3/ads.proto'], {
    includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const service = def['envoy.service.discovery.v3.AggregatedDiscoveryService'];
  let nonce = 0;
  const streams = new Set();
  const server = new grpc.Server();
  server.addService(service, {
    StreamAggregatedResources(call) {
      streams.add(call);
      let sent = null;
      call.on('data', (req) => {
        const node = req.node?.id ?? '';
        if (req.error_detail !== null) console.log(`NACK version=${req.version_info || '-'} nonce=${req.response_nonce} node=${node}: ${req.error_detail.message}`);
        else if (req.response_nonce !== '') console.log(`ACK ${req.version_info} nonce=${req.response_nonce} node=${node}`);
        else console.log(`request node=${node} type=${req.type_url}`);
        // State of the world: the snapshot to a stream that does not hold its version yet, once.
        if (req.type_url !== TYPE_URL || req.version_info === options.version || sent === options.version) return;
        sent = options.version;
        call.write({ version_info: options.version, resources, type_url: TYPE_URL, nonce: `n${++nonce}` });
      });
      const gone = () => streams.delete(call);
      call.on('error', gone);
      call.on('cancelled', gone);
      call.on('end', () => {
        gone();
        call.end();
      });
    },
  });
  let creds = grpc.ServerCredentials.createInsecure();
  if (options.cert !== undefined) {
    const ca = options.ca === undefined ? null : readFileSync(options.ca);
    creds = grpc.ServerCredentials.createSsl(ca, [{ cert_chain: readFileSync(options.cert), private_key: readFileSync(options.key) }], ca !== null);
  }
  server.bindAsync(`${options.bind}:${options.port}`, creds, (e, port) => {
    if (e) {
      console.error(`xds-serve: cannot listen on ${options.bind}:${options.port}: ${e.message}`);
      process.exit(1);
    }
    console.log(`listening on ${options.bind}:${port} (${resources.length} resource${resources.length === 1 ? '' : 's'}, version ${options.version}${options.cert === undefined ? '' : options.ca === undefined ? ', TLS' : ', mutual TLS'})`);
  });
  const stop = () => {
    for (const call of streams) call.end();
    server.tryShutdown(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      bind: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '18001' },
      version: { type: 'string', default: 'v1' },
      cert: { type: 'string' },
      key: { type: 'string' },
      ca: { type: 'string' },
    },
  });
  if (positionals.length === 0) throw new Error('give at least one YAML file of limits');
  if ((values.cert === undefined) !== (values.key === undefined)) throw new Error('--cert and --key go together');
  if (values.ca !== undefined && values.cert === undefined) throw new Error('--ca needs --cert and --key');
  const resources = positionals.map((file) => resourceFromYaml(basename(file), readFileSync(file, 'utf8')));
  serve(values, resources);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    main();
  } catch (e) {
    console.error(`xds-serve: ${e.message}`);
    process.exit(2);
  }
}
