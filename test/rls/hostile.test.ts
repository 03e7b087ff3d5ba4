/**
 * Hostile peers on the gRPC port: malformed frames and messages, oversized messages, a flood of
 * connections and of streams, oversized requests. Each gets a gRPC error or a closed connection;
 * the server never ends and goes on answering. Bounded in count and time; CELLGATE_SOAK=1 runs
 * the longer variant.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { counter, startRls, until, type Rls } from './helpers.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const MAX_CONNECTIONS = 20;
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

let rls: Rls;
beforeAll(async () => {
  rls = await startRls({ 'app.yaml': 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1000000 }\n' },
    ['--rls-max-connections', String(MAX_CONNECTIONS), '--rls-max-message-bytes', '65536']);
});
afterAll(async () => {
  await rls?.stop();
});

async function stillServes(): Promise<void> {
  expect(rls.server.proc.exitCode).toBeNull();
  const r = await rls.should('app', [{ entries: [{ key: 'k', value: 'alive' }] }]);
  expect(r.overall_code).toBe('OK');
}

/** One raw gRPC call over node:http2 with `body` as the bytes after the 5-byte frame header's place. */
function rawCall(frame: Buffer): Promise<{ status: string | undefined; message: string | undefined }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${rls.rlsPort}`);
    session.on('error', () => undefined);
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
    let status: string | undefined;
    let message: string | undefined;
    req.on('response', (headers) => {
      // A trailers-only answer carries grpc-status in the headers.
      if (headers['grpc-status'] !== undefined) {
        status = String(headers['grpc-status']);
        message = headers['grpc-message'] as string | undefined;
      }
    });
    req.on('trailers', (t) => {
      status = String(t['grpc-status']);
      message = t['grpc-message'] as string | undefined;
    });
    req.on('data', () => undefined);
    req.on('error', reject);
    req.on('close', () => {
      session.close();
      resolve({ status, message: message === undefined ? undefined : decodeURIComponent(message) });
    });
    req.end(frame);
  });
}

function grpcFrame(payload: Buffer, declaredLength = payload.length): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt8(0, 0);
  header.writeUInt32BE(declaredLength, 1);
  return Buffer.concat([header, payload]);
}

describe('malformed gRPC', () => {
  it('a message that is not a RateLimitRequest: a gRPC error (INTERNAL), the server goes on', async () => {
    const r = await rawCall(grpcFrame(Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])));
    expect(r.status).toBe(String(grpc.status.INTERNAL));
    await stillServes();
  });
  it('a truncated frame (the length says more than comes): an error status, never a hang or a crash', async () => {
    const r = await rawCall(grpcFrame(Buffer.from([0x0a, 0x03]), 100));
    expect(r.status).not.toBe('0');
    expect(r.status).not.toBeUndefined();
    await stillServes();
  });
  it('a frame header announcing 2 GB: RESOURCE_EXHAUSTED before anything is buffered', async () => {
    const r = await rawCall(grpcFrame(Buffer.alloc(0), 0x7fffffff));
    expect(r.status).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
    await stillServes();
  });
  it('bytes that are not HTTP/2 at all: the connection is closed', async () => {
    const socket = net.connect(rls.rlsPort, '127.0.0.1');
    socket.on('error', () => undefined);
    await new Promise((r) => socket.once('connect', r));
    socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n' + 'x'.repeat(10_000));
    await new Promise((r) => socket.once('close', r));
    expect(counter(await rls.metrics(), 'cellgate_rls_refused_connections_total{reason="not_http2"}')).toBe(1);
    await stillServes();
  });
  it('a peer that connects and sends nothing is closed after 10 s; a working connection stays past that', async () => {
    // The test's own channel, opened and used before the silent peer.
    await stillServes();
    const received = counter(await rls.metrics(), 'cellgate_rls_connections_received_total');
    const silent = net.connect(rls.rlsPort, '127.0.0.1');
    silent.on('error', () => undefined);
    await new Promise((r) => silent.once('close', r));
    await stillServes();
    // Served on the same connection as before: one more accepted (the silent one), one open.
    const m = await rls.metrics();
    expect(counter(m, 'cellgate_rls_connections_received_total')).toBe(received + 1);
    expect(counter(m, 'cellgate_rls_connections')).toBe(1);
  }, 30_000);
});

describe('oversized requests', () => {
  it('a message over rls-max-message-bytes: RESOURCE_EXHAUSTED', async () => {
    const e = await rls.shouldFail({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'v'.repeat(100_000) }] }] });
    expect(e.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    await stillServes();
  });
  it('too many descriptors, entries, or a cache key too long: INVALID_ARGUMENT', async () => {
    const many = Array.from({ length: 300 }, () => ({ entries: [{ key: 'k', value: 'v' }] }));
    expect((await rls.shouldFail({ domain: 'app', descriptors: many })).code).toBe(grpc.status.INVALID_ARGUMENT);
    const deep = [{ entries: Array.from({ length: 100 }, () => ({ key: 'k', value: 'v' })) }];
    expect((await rls.shouldFail({ domain: 'app', descriptors: deep })).code).toBe(grpc.status.INVALID_ARGUMENT);
    const long = [{ entries: [{ key: 'k', value: 'v'.repeat(9000) }] }];
    const e = await rls.shouldFail({ domain: 'app', descriptors: long });
    expect(e.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(e.details).toContain('cache key is longer than 8192 bytes');
    await stillServes();
  });
});

describe('floods', () => {
  it(`connections beyond rls-max-connections (${MAX_CONNECTIONS}) are closed at once and counted; the port serves again after`, async () => {
    const COUNT = SOAK ? 2000 : 60;
    const sockets: net.Socket[] = [];
    let closedByServer = 0;
    for (let i = 0; i < COUNT; i++) {
      const s = net.connect(rls.rlsPort, '127.0.0.1');
      s.on('error', () => undefined);
      s.on('close', () => closedByServer++);
      sockets.push(s);
    }
    await until(() => closedByServer >= COUNT - MAX_CONNECTIONS, 'the connections over the cap to be closed');
    const refused = counter(await rls.metrics(), 'cellgate_rls_refused_connections_total{reason="max_connections"}');
    console.log(`[attack] rls connection flood: ${COUNT} opened, ${closedByServer} closed by the server, refused counter ${refused}`);
    expect(refused).toBeGreaterThanOrEqual(COUNT - MAX_CONNECTIONS);
    for (const s of sockets) s.destroy();
    await until(async () => counter(await rls.metrics(), 'cellgate_rls_connections') <= 1, 'the flood\'s connections to be gone');
    // The test's own client reconnects as needed.
    await stillServes();
  });

  it('thousands of streams on one connection: all answered or refused, none lost, the server goes on', async () => {
    const STREAMS = SOAK ? 20_000 : 1000;
    const client = new (rls.client.constructor as typeof grpc.Client)(`127.0.0.1:${rls.rlsPort}`, grpc.credentials.createInsecure());
    let ok = 0;
    let errors = 0;
    const started = process.hrtime.bigint();
    await Promise.all(Array.from({ length: STREAMS }, (_, i) => new Promise<void>((resolve) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any).ShouldRateLimit({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: `s${i % 100}` }] }] }, (e: Error | null) => {
        if (e === null) ok++;
        else errors++;
        resolve();
      });
    })));
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    client.close();
    console.log(`[attack] rls stream flood: ${STREAMS} calls on one channel, ${ok} answered, ${errors} errors, ${ms.toFixed(0)} ms`);
    expect(ok + errors).toBe(STREAMS);
    expect(ok).toBeGreaterThan(0);
    await stillServes();
  });
});

describe('HTTP/2 rapid reset', () => {
  it('streams opened and reset at once, thousands on one connection: the server goes on', async () => {
    const STREAMS = SOAK ? 100_000 : 5000;
    const session = http2.connect(`http://127.0.0.1:${rls.rlsPort}`);
    session.on('error', () => undefined);
    await new Promise((r) => session.once('connect', r));
    let opened = 0;
    for (let i = 0; i < STREAMS && !session.closed && !session.destroyed; i++) {
      const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => undefined);
      req.close(http2.constants.NGHTTP2_CANCEL);
      opened++;
      if (i % 500 === 499) await new Promise((r) => setImmediate(r));
    }
    await new Promise((r) => setTimeout(r, 200));
    const closedByServer = session.closed || session.destroyed;
    session.destroy();
    console.log(`[attack] rls rapid reset: ${opened} streams opened and reset on one connection; connection closed by the server: ${closedByServer}`);
    await stillServes();
  });
});

describe('memory', () => {
  it('maxmemory with noeviction: new keys are refused UNAVAILABLE with the OOM text, as a RESP limiter call, and the server goes on', async () => {
    const info = (await rls.redis.info('memory')) as string;
    const used = Number(/used_memory:(\d+)/.exec(info)![1]);
    await rls.redis.call('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    await rls.redis.call('CONFIG', 'SET', 'maxmemory', String(used + 64 * 1024));
    let refusal: grpc.ServiceError | null = null;
    let answered = 0;
    for (let i = 0; i < 20_000 && refusal === null; i++) {
      try {
        await rls.should('app', [{ entries: [{ key: 'k', value: `fill-${i}-${'x'.repeat(200)}` }] }]);
        answered++;
      } catch (e) {
        refusal = e as grpc.ServiceError;
      }
    }
    console.log(`[attack] rls maxmemory: ${answered} new keys answered before the refusal`);
    expect(refusal).not.toBeNull();
    expect(refusal!.code).toBe(grpc.status.UNAVAILABLE);
    expect(refusal!.details).toContain("OOM command not allowed when used memory > 'maxmemory'");
    await rls.redis.call('CONFIG', 'SET', 'maxmemory', '0');
    await stillServes();
  });
});
