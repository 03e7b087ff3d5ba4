/**
 * The gRPC port's bounds against peers that start and do not finish: request messages announced and
 * never completed (held bytes counted in INFO, bounded per connection and per process, released when
 * the call ends or the client leaves, ended by rls-message-timeout), and connections that send only
 * HTTP/2's preface (rls-handshake-timeout; rls-max-connections-per-peer keeps one address from
 * taking the whole cap). Raw peers over node:http2 and net; the served clients are grpc-js.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { counter, RateLimitServiceClient, startRls, until, type Rls } from './helpers.js';

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const LIMITS = { 'app.yaml': 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1000000 }\n' };
const MAX_MESSAGE = 65536;
const PER_CONNECTION = 4 * MAX_MESSAGE;
const PER_PROCESS = 16 * MAX_MESSAGE;

const started: Rls[] = [];
afterAll(async () => {
  for (const r of started) await r.stop();
});

async function start(args: string[]): Promise<Rls> {
  const rls = await startRls(LIMITS, args);
  started.push(rls);
  return rls;
}

async function info(rls: Rls): Promise<Record<string, number>> {
  const text = String(await rls.redis.info('all'));
  const out: Record<string, number> = {};
  for (const line of text.split('\r\n')) {
    const m = /^([a-z_]+):(-?\d+)$/.exec(line);
    if (m !== null) out[m[1]] = Number(m[2]);
  }
  return out;
}

async function served(rls: Rls, value: string): Promise<void> {
  expect(rls.server.proc.exitCode).toBeNull();
  expect((await rls.should('app', [{ entries: [{ key: 'k', value }] }])).overall_code).toBe('OK');
}

interface Held {
  session: http2.ClientHttp2Session;
  /** The grpc-status each stream ended with (undefined while open). */
  statuses: (string | undefined)[];
  messages: (string | undefined)[];
}

/**
 * `streams` calls on one connection, each announcing a message of `announced` bytes and sending all
 * of it but the last byte, then waiting.
 */
async function holdUnfinished(rls: Rls, streams: number, announced: number): Promise<Held> {
  const session = http2.connect(`http://127.0.0.1:${rls.rlsPort}`);
  session.on('error', () => undefined);
  await new Promise((r) => session.once('remoteSettings', r));
  const held: Held = { session, statuses: [], messages: [] };
  const header = Buffer.alloc(5);
  header.writeUInt32BE(announced, 1);
  for (let i = 0; i < streams; i++) {
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' });
    req.on('error', () => undefined);
    req.on('response', (h) => {
      if (h['grpc-status'] !== undefined) {
        held.statuses[i] = String(h['grpc-status']);
        held.messages[i] = decodeURIComponent(String(h['grpc-message'] ?? ''));
      }
    });
    req.on('data', () => undefined);
    req.write(header);
    req.write(Buffer.alloc(announced - 1, 0x0a));
  }
  return held;
}

describe('unfinished request messages', () => {
  it('a half-sent message under the budget is held and counted in INFO (the connection\'s memory account too), and released when the client leaves', async () => {
    const rls = await start(['--rls-max-message-bytes', String(MAX_MESSAGE), '--rls-max-unfinished-bytes-per-connection', String(PER_CONNECTION),
      '--rls-max-unfinished-bytes', String(PER_PROCESS), '--rls-message-timeout', '3600000']);
    await served(rls, 'warm');
    const before = await info(rls);
    expect(before.rls_grpc_unfinished_bytes).toBe(0);
    const held = await holdUnfinished(rls, 1, 60_000);
    // The whole message but one byte: held (not refused, not answered).
    await until(async () => (await info(rls)).rls_grpc_unfinished_bytes === 59_999, 'the half-sent message to be held');
    const during = await info(rls);
    expect(during.rls_grpc_unfinished_calls).toBe(1);
    expect(during.clients_total_memory - before.clients_total_memory).toBeGreaterThanOrEqual(59_999);
    expect(during.mem_clients_normal).toBe(during.clients_total_memory);
    expect(held.statuses[0]).toBeUndefined();
    await served(rls, 'meanwhile');
    held.session.destroy();
    await until(async () => (await info(rls)).rls_grpc_unfinished_bytes === 0, 'the held bytes to be released');
    const after = await info(rls);
    expect(after.rls_grpc_unfinished_calls).toBe(0);
    // Back to where it was, but for the RESP client's own account, which moves by a reply's size.
    expect(Math.abs(after.clients_total_memory - before.clients_total_memory)).toBeLessThan(8 * 1024);
  });

  it('100 streams each holding a near-max unfinished message: the connection holds at most its budget, the rest end RESOURCE_EXHAUSTED, all released after the client leaves', async () => {
    const rls = await start(['--rls-max-message-bytes', String(MAX_MESSAGE), '--rls-max-unfinished-bytes-per-connection', String(PER_CONNECTION),
      '--rls-max-unfinished-bytes', String(PER_PROCESS), '--rls-message-timeout', '3600000']);
    await served(rls, 'warm');
    const before = await info(rls);
    const held = await holdUnfinished(rls, 100, MAX_MESSAGE);
    // Each call ends up either ended by the budget or holding its whole message but one byte (the
    // peer's DATA frames of different streams interleave, so which ones is not fixed).
    const whole = MAX_MESSAGE - 1;
    const ended = (): number => held.statuses.filter((s) => s !== undefined).length;
    await until(async () => {
      const bytes = (await info(rls)).rls_grpc_unfinished_bytes;
      return bytes % whole === 0 && ended() + bytes / whole === 100;
    }, 'every call to be ended or holding its message', 30_000);
    const during = await info(rls);
    console.log(`[attack] rls unfinished messages: 100 streams x ${whole} bytes on one connection; held ${during.rls_grpc_unfinished_bytes} bytes, ${ended()} calls ended, clients_total_memory +${during.clients_total_memory - before.clients_total_memory}`);
    expect(during.rls_grpc_unfinished_bytes).toBeLessThanOrEqual(PER_CONNECTION);
    expect(ended()).toBeGreaterThanOrEqual(96);
    expect(held.statuses.filter((s) => s !== undefined && s !== String(grpc.status.RESOURCE_EXHAUSTED))).toEqual([]);
    expect(held.messages.find((m) => m !== undefined)).toContain('rls-max-unfinished-bytes-per-connection');
    expect(during.rls_grpc_budget_resets).toBe(ended());
    // The account grew by what is held plus one connection's base cost, nothing more.
    expect(during.clients_total_memory - before.clients_total_memory).toBeLessThanOrEqual(PER_CONNECTION + 64 * 1024);
    await served(rls, 'meanwhile');
    held.session.destroy();
    await until(async () => (await info(rls)).rls_grpc_unfinished_bytes === 0, 'the held bytes to be released');
    expect(Math.abs((await info(rls)).clients_total_memory - before.clients_total_memory)).toBeLessThan(8 * 1024);
  });

  it('many connections doing the same: the process holds at most rls-max-unfinished-bytes', async () => {
    const rls = await start(['--rls-max-message-bytes', String(MAX_MESSAGE), '--rls-max-unfinished-bytes-per-connection', String(PER_CONNECTION),
      '--rls-max-unfinished-bytes', String(PER_PROCESS), '--rls-message-timeout', '3600000']);
    const sessions: Held[] = [];
    for (let i = 0; i < 6; i++) sessions.push(await holdUnfinished(rls, 8, MAX_MESSAGE));
    // 6 x 4 would fit their connections' budgets, but 16 x 65,535 is all the process takes.
    const whole = MAX_MESSAGE - 1;
    const ended = (): number => sessions.reduce((n, s) => n + s.statuses.filter((x) => x !== undefined).length, 0);
    await until(async () => {
      const bytes = (await info(rls)).rls_grpc_unfinished_bytes;
      return bytes % whole === 0 && ended() + bytes / whole === 48;
    }, 'every call to be ended or holding its message', 30_000);
    const during = await info(rls);
    expect(during.rls_grpc_unfinished_bytes).toBeLessThanOrEqual(PER_PROCESS);
    expect(ended()).toBeGreaterThanOrEqual(48 - 16);
    await until(() => sessions.some((s) => s.messages.some((m) => m?.includes('(rls-max-unfinished-bytes)'))), 'a call ended by the process budget');
    await served(rls, 'meanwhile');
    for (const s of sessions) s.session.destroy();
    await until(async () => (await info(rls)).rls_grpc_unfinished_bytes === 0, 'the held bytes to be released');
  });

  it('a message not complete within rls-message-timeout: DEADLINE_EXCEEDED, its bytes released, the connection still serves', async () => {
    const rls = await start(['--rls-max-message-bytes', String(MAX_MESSAGE), '--rls-message-timeout', '300']);
    const held = await holdUnfinished(rls, 3, 30_000);
    await until(() => held.statuses.filter((s) => s !== undefined).length === 3, 'the late calls to be ended');
    expect(held.statuses).toEqual(Array(3).fill(String(grpc.status.DEADLINE_EXCEEDED)));
    expect(held.messages[0]).toContain('rls-message-timeout');
    const after = await info(rls);
    expect(after.rls_grpc_unfinished_bytes).toBe(0);
    expect(after.rls_grpc_message_timeouts).toBe(3);
    // The same connection takes a whole message after that.
    const req = held.session.request({ ':method': 'POST', ':path': '/grpc.health.v1.Health/Check', 'content-type': 'application/grpc', te: 'trailers' });
    const status = await new Promise<string>((resolve, reject) => {
      req.on('trailers', (t) => resolve(String(t['grpc-status'])));
      req.on('data', () => undefined);
      req.on('error', reject);
      req.end(Buffer.alloc(5));
    });
    expect(status).toBe('0');
    held.session.destroy();
  });
});

/** `n` sockets from `from` that send HTTP/2's preface and nothing more. */
async function prefaceOnly(port: number, n: number, from: string): Promise<{ sockets: net.Socket[]; closed: () => number }> {
  const sockets: net.Socket[] = [];
  let closed = 0;
  for (let i = 0; i < n; i++) {
    const s = net.connect({ port, host: '127.0.0.1', localAddress: from });
    s.on('error', () => undefined);
    s.on('close', () => closed++);
    // Read what the server sends (its SETTINGS), so that its closing is seen.
    s.on('data', () => undefined);
    s.on('connect', () => s.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'));
    sockets.push(s);
  }
  return { sockets, closed: () => closed };
}

describe('connections that stop after the preface', () => {
  it('one address holding preface-only sockets up to rls-max-connections does not keep a new grpc-js client out', async () => {
    const rls = await start(['--rls-max-connections', '40', '--rls-max-connections-per-peer', '10', '--rls-handshake-timeout', '600000']);
    const flood = await prefaceOnly(rls.rlsPort, 40, '127.0.0.2');
    await until(async () => counter(await rls.metrics(), 'cellgate_rls_connections_received_total') >= 40, 'the server to have seen the 40 sockets');
    // A client that was never connected before, from another address.
    const client = new RateLimitServiceClient(`127.0.0.1:${rls.rlsPort}`, grpc.credentials.createInsecure());
    const answer = await new Promise<{ overall_code: string }>((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any).ShouldRateLimit({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'new' }] }] }, { deadline: Date.now() + 20_000 }, (e: Error | null, r: never) => (e ? reject(e) : resolve(r)));
    });
    client.close();
    expect(answer.overall_code).toBe('OK');
    const m = await rls.metrics();
    expect(counter(m, 'cellgate_rls_refused_connections_total{reason="per_peer"}')).toBe(30);
    expect(flood.closed()).toBe(30);
    for (const s of flood.sockets) s.destroy();
  });

  it('a connection that sends the preface but no SETTINGS is closed at rls-handshake-timeout; a working one stays', async () => {
    const rls = await start(['--rls-handshake-timeout', '300']);
    await served(rls, 'first');
    const received = counter(await rls.metrics(), 'cellgate_rls_connections_received_total');
    const flood = await prefaceOnly(rls.rlsPort, 5, '127.0.0.3');
    await until(() => flood.closed() === 5, 'the preface-only sockets to be closed');
    const m = await rls.metrics();
    expect(counter(m, 'cellgate_rls_refused_connections_total{reason="handshake_timeout"}')).toBe(5);
    // The test's own client kept its connection through it all: served on it, no new one.
    await served(rls, 'second');
    expect(counter(await rls.metrics(), 'cellgate_rls_connections_received_total')).toBe(received + 5);
    expect(counter(await rls.metrics(), 'cellgate_rls_connections')).toBe(1);
  });
});
