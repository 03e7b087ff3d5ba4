#!/usr/bin/env node
/**
 * A floor under the rate limit service's CPU per call: a bare node:http2 server that answers every
 * gRPC call with one fixed ShouldRateLimit response (an OK status for one descriptor, encoded by
 * cellgate's own codec), with no configuration, matching, keyspace, grpc-js or interceptors. What it
 * spends per call is what Node's HTTP/2 costs for one unary gRPC call (a stream, its headers, one data
 * frame each way, trailers); bench/rls.mjs runs it under the same client as the real service.
 *
 *   node bench/rls-http2-floor.mjs <port>     (prints "ready" once it listens)
 */
import http2 from 'node:http2';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

const { encodeRateLimitResponse } = await import(pathToFileURL(join(ROOT, 'dist/rls/codec.js')).href);
const body = encodeRateLimitResponse({
  overall_code: 'OK',
  statuses: [{ code: 'OK', current_limit: { requests_per_unit: 1_000_000_000, unit: 'MINUTE', name: '' }, limit_remaining: 999_999_999, duration_until_reset: { seconds: 30, nanos: 0 } }],
  response_headers_to_add: [],
});
// A gRPC message: compressed flag, 4-byte length, the protobuf bytes.
const frame = Buffer.alloc(5 + body.length);
frame.writeUInt32BE(body.length, 1);
body.copy(frame, 5);

const server = http2.createServer();
server.on('stream', (stream) => {
  stream.on('data', () => {});
  stream.on('end', () => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame);
  });
  stream.on('error', () => {});
});
server.listen(Number(process.argv[2]), '127.0.0.1', () => process.stdout.write('ready\n'));
