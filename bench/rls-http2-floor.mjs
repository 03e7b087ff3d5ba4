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
import { FIXED_ANSWER_MESSAGE as frame } from './rls-fixed-answer.mjs';

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
