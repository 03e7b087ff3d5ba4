/**
 * Abuse over loopback (docs/security.md): slow-loris connections, a client pipelining 200,000 commands without
 * reading, 10,000 idle connections, a client announcing a 500 MiB argument and trickling it. For each:
 * the server stays up, a separate connection's PING round trip stays short (measured the whole time,
 * printed as `[abuse] ...` lines), keys written before are intact, and live memory (used_memory_heap after
 * DEBUG GC) returns near its baseline afterwards.
 *
 * Bounded in count and time. CELLGATE_SOAK=1 runs larger variants (more connections, 2M commands).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { spawnSync } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, infoField, liveMemory, mbulk, parseReplies, processAlive, startPingProbe } from '../helpers/raw.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
/**
 * Everyone else is still served: a PING probe runs through each abuse, and its stop() fails if any
 * PING went unanswered for 5 s or got a wrong answer. How fast they were answered is printed, not
 * asserted (a wall-clock bound fails on a loaded machine; latency figures belong to bench/).
 */
/** Live memory after an abuse may exceed the baseline by at most this much. */
const MEMORY_SLACK_BYTES = 24 * 1024 * 1024;

let server: RunningServer;
let c: Checker;
const ANCHORS = Array.from({ length: 100 }, (_, i) => `anchor:${i}`);
let anchorState: unknown[];

beforeAll(async () => {
  server = await startServer({ args: ['--maxclients', '20000'] });
  c = await Checker.open(server.port);
  // Keys that must survive every abuse untouched: a frozen clock, a long period, peeked with COST 0.
  await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  for (const k of ANCHORS) await c.call('RL.TOKENBUCKET', k, '100', '86400000', 'COST', '7');
  anchorState = await anchorsNow();
});

afterAll(async () => {
  c?.close();
  const alive = server !== undefined && processAlive(server);
  await server?.stop();
  expect(alive).toBe(true);
});

async function anchorsNow(): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const k of ANCHORS) out.push(await c.call('RL.TOKENBUCKET', k, '100', '86400000', 'COST', '0'));
  return out;
}

async function expectAnchorsIntact(): Promise<void> {
  expect(await anchorsNow()).toEqual(anchorState);
}

async function connectedClients(): Promise<number> {
  return Number(infoField(await c.call('INFO', 'clients'), 'connected_clients'));
}

async function waitForClients(n: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await connectedClients()) !== n) {
    if (Date.now() > deadline) throw new Error(`connected_clients is ${await connectedClients()}, expected ${n}`);
    await delay(20);
  }
}

function report(what: string, numbers: Record<string, string | number>): void {
  console.log(`[abuse] ${what}: ${Object.entries(numbers).map(([k, v]) => `${k} ${v}`).join(', ')}`);
}

function mb(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

describe('abuse', () => {
  it(`${SOAK ? 5000 : 500} slow-loris connections each sending half a command`, async () => {
    const n = SOAK ? 5000 : 500;
    const before = await liveMemory(c);
    const baseClients = await connectedClients();
    const probe = await startPingProbe(server.port);
    const conns: RawConnection[] = [];
    try {
      for (let i = 0; i < n; i += 250) conns.push(...(await Promise.all(Array.from({ length: Math.min(250, n - i) }, () => RawConnection.open(server.port)))));
      await Promise.all(conns.map((conn, i) => conn.write(i % 2 === 0 ? '*3\r\n$3\r\nSET\r\n$1\r\nk' : 'CL.THROTTLE slow')));
      // Then one more byte each, a few times, as a slow-loris does to stay "active".
      for (let round = 0; round < (SOAK ? 20 : 5); round++) {
        await delay(100);
        await Promise.all(conns.map((conn) => conn.write('x')));
      }
      await waitForClients(baseClients + n + 1);
      const pings = await probe.stop();
      report(`${n} slow-loris connections`, { pings: pings.count, 'PING p50': `${pings.p50Ms.toFixed(2)} ms`, 'PING p99': `${pings.p99Ms.toFixed(2)} ms`, 'PING max': `${pings.maxMs.toFixed(2)} ms` });
      expect(pings.count).toBeGreaterThan(0);
      // Nobody got an answer: half a command is not a command.
      expect(conns.every((conn) => conn.length === 0 && !conn.ended)).toBe(true);
    } finally {
      for (const conn of conns) conn.destroy();
    }
    await waitForClients(baseClients);
    await expectAnchorsIntact();
    const after = await liveMemory(c);
    report(`${n} slow-loris connections, live memory`, { before: mb(before), after: mb(after) });
    expect(after).toBeLessThan(before + MEMORY_SLACK_BYTES);
  });

  it(`a client pipelining ${SOAK ? '2,000,000' : '200,000'} commands without reading: bounded memory, nothing lost`, async () => {
    const n = SOAK ? 2_000_000 : 200_000;
    const before = await liveMemory(c);
    const payload = 'p'.repeat(100);
    const socket = await new Promise<net.Socket>((resolve) => {
      const s = net.connect(server.port, '127.0.0.1', () => resolve(s));
    });
    socket.pause(); // do not read: replies pile up
    const chunks: Buffer[] = [];
    socket.on('data', (d: Buffer) => chunks.push(d));
    // Built before the probe starts: the probe runs in this process, and building 200,000 frames
    // would otherwise be measured as server latency.
    const batches: Buffer[] = [];
    for (let i = 0; i < n; i += 10_000) {
      const parts: Buffer[] = [];
      for (let j = i; j < i + 10_000; j++) parts.push(mbulk('ECHO', `${j}:${payload}`));
      batches.push(Buffer.concat(parts));
    }
    const probe = await startPingProbe(server.port);
    let peakUsed = 0;
    let peakOmem = 0;
    try {
      // Write everything (the client's own socket buffers what the kernel does not take).
      for (const b of batches) socket.write(b);
      // Watch the server while it is stuck on this client: memory stays bounded, others are served.
      for (let i = 0; i < 20; i++) {
        await delay(50);
        const mem = String(await c.call('INFO', 'memory'));
        peakUsed = Math.max(peakUsed, Number(infoField(mem, 'used_memory_heap')));
        const list = String(await c.call('CLIENT', 'LIST'));
        for (const m of list.matchAll(/omem=(\d+)/g)) peakOmem = Math.max(peakOmem, Number(m[1]));
      }
      const pings = await probe.stop();
      report(`pipeline of ${n} commands, client not reading`, {
        'PING p50': `${pings.p50Ms.toFixed(2)} ms`, 'PING p99': `${pings.p99Ms.toFixed(2)} ms`, 'PING max': `${pings.maxMs.toFixed(2)} ms`, 'peak used_memory_heap': mb(peakUsed),
        'peak omem of the client': mb(peakOmem), 'client bytes still unsent': mb(socket.writableLength),
      });
      expect(pings.count).toBeGreaterThan(0);
      // Read on while its replies wait (as Redis), bounded by client-output-buffer-limit's 256 MB hard limit.
      expect(peakOmem).toBeLessThanOrEqual(256 * 1024 * 1024);
      expect(peakUsed).toBeLessThan(before + 96 * 1024 * 1024);
      // Now read: every reply arrives, in order.
      socket.resume();
      const expectedBytes = (() => {
        let total = 0;
        for (let j = 0; j < n; j++) {
          const len = `${j}:${payload}`.length;
          total += `$${len}\r\n`.length + len + 2;
        }
        return total;
      })();
      const deadline = Date.now() + (SOAK ? 300_000 : 60_000);
      let received = 0;
      while (received < expectedBytes && Date.now() < deadline) {
        await delay(20);
        received = chunks.reduce((a, b) => a + b.length, 0);
      }
      expect(received).toBe(expectedBytes);
      const all = Buffer.concat(chunks);
      const { replies, rest } = parseReplies(all);
      expect(rest).toBe(0);
      expect(replies.length).toBe(n);
      const wrong = replies.findIndex((r, j) => r !== `${j}:${payload}`);
      expect(wrong).toBe(-1);
    } finally {
      socket.destroy();
    }
    await expectAnchorsIntact();
    const after = await liveMemory(c);
    report(`pipeline of ${n} commands, live memory`, { before: mb(before), after: mb(after) });
    expect(after).toBeLessThan(before + MEMORY_SLACK_BYTES);
  });

  it(`${SOAK ? '18,000' : '10,000'} idle connections`, async (ctx) => {
    const n = SOAK ? 18_000 : 10_000;
    const limit = spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim();
    if (limit !== 'unlimited' && Number(limit) < n + 500) {
      ctx.skip(`open-file limit (ulimit -n) is ${limit}, below the ${n + 500} this test needs (the test process and the server each hold one fd per connection)`);
    }
    const before = await liveMemory(c);
    const baseClients = await connectedClients();
    const probe = await startPingProbe(server.port);
    const sockets: net.Socket[] = [];
    let connectMs = 0;
    try {
      const t0 = Date.now();
      // Waves small enough for the listen backlog (511 by default).
      for (let i = 0; i < n; i += 400) {
        const wave = await Promise.all(Array.from({ length: Math.min(400, n - i) }, () => new Promise<net.Socket>((resolve, reject) => {
          const s = net.connect(server.port, '127.0.0.1', () => resolve(s));
          s.once('error', reject);
        })));
        sockets.push(...wave);
      }
      await waitForClients(baseClients + n + 1, 30_000);
      connectMs = Date.now() - t0;
      const connected = await liveMemory(c);
      await delay(300); // idle for a while, the probe still pinging
      const pings = await probe.stop();
      report(`${n} idle connections`, {
        'connect time': `${connectMs} ms`, 'PING p50': `${pings.p50Ms.toFixed(2)} ms`, 'PING p99': `${pings.p99Ms.toFixed(2)} ms`, 'PING max': `${pings.maxMs.toFixed(2)} ms`,
        'live memory per connection': `${Math.round((connected - before) / n)} B`,
      });
      expect(pings.count).toBeGreaterThan(0);
      // Each one still works.
      const sample = sockets.filter((_, i) => i % 1000 === 0);
      const answers = await Promise.all(sample.map((s) => new Promise<string>((resolve) => {
        s.once('data', (d: Buffer) => resolve(d.toString('latin1')));
        s.write('PING\r\n');
      })));
      expect(answers.every((a) => a === '+PONG\r\n')).toBe(true);
    } finally {
      for (const s of sockets) s.destroy();
    }
    await waitForClients(baseClients, 30_000);
    await expectAnchorsIntact();
    const after = await liveMemory(c);
    report(`${n} idle connections, live memory`, { before: mb(before), after: mb(after) });
    expect(after).toBeLessThan(before + MEMORY_SLACK_BYTES);
  });

  it('a client announcing a 500 MiB argument and trickling bytes: no up-front allocation', async () => {
    const before = await liveMemory(c);
    const rssBefore = Number(infoField(await c.call('INFO', 'memory'), 'used_memory_rss'));
    const probe = await startPingProbe(server.port);
    const conn = await RawConnection.open(server.port);
    const sent = SOAK ? 64 * 1024 * 1024 : 4 * 1024 * 1024;
    try {
      await conn.write(`*2\r\n$4\r\nECHO\r\n$${500 * 1024 * 1024}\r\n`);
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      for (let i = 0; i < sent / chunk.length; i++) {
        await conn.write(chunk);
        if (i % 8 === 0) await delay(5);
      }
      // Until the server has read everything sent (a loaded machine may take a while): counted, not timed.
      const clientQbuf = async (): Promise<number> =>
        Number(/qbuf=(\d+)/.exec(String(await c.call('CLIENT', 'LIST')).split('\n').find((l) => !l.includes('cmd=client|list') && /qbuf=[1-9]/.test(l)) ?? 'qbuf=0')![1]);
      let qbuf = await clientQbuf();
      for (let tries = 0; qbuf < sent && tries < 200; tries++) {
        await delay(50);
        qbuf = await clientQbuf();
      }
      const mem = String(await c.call('INFO', 'memory'));
      const used = Number(infoField(mem, 'used_memory_heap'));
      const rss = Number(infoField(mem, 'used_memory_rss'));
      const pings = await probe.stop();
      report('500 MiB announced, trickled', {
        sent: mb(sent), 'qbuf of the client': mb(qbuf), 'used_memory_heap growth': mb(used - before), 'rss growth': mb(rss - rssBefore),
        'PING max': `${pings.maxMs.toFixed(2)} ms`,
      });
      expect(qbuf).toBeGreaterThanOrEqual(sent);
      expect(used - before).toBeLessThan(sent + 64 * 1024 * 1024);
      expect(rss - rssBefore).toBeLessThan(sent + 128 * 1024 * 1024);
      expect(pings.count).toBeGreaterThan(0);
      expect([conn.length, conn.ended]).toEqual([0, false]);
    } finally {
      conn.destroy();
    }
    await delay(50);
    const after = await liveMemory(c);
    report('500 MiB announced, live memory', { before: mb(before), after: mb(after) });
    expect(after).toBeLessThan(before + MEMORY_SLACK_BYTES);
    await expectAnchorsIntact();
  });
});
