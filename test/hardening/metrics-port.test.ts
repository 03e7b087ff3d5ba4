/**
 * The metrics port: it listens on `metrics-bind` (loopback by default), not on the server's `bind`
 * addresses, idle connections to it cannot take descriptors without bound (a connection cap), and
 * nobody can hold it: idle, slow and kept-alive connections make room for new ones (so /healthz is
 * always answered) and are closed after `metrics-timeout`.
 * 127.0.0.2 and 127.0.0.3 are loopback addresses too (Linux routes 127/8 to lo): they stand for
 * "an address other than the default" without leaving the machine.
 */
import { readdirSync } from 'node:fs';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { freePort, startServer } from '../helpers/server.js';
import { RawConnection } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

/** The HTTP status of GET `path` (/metrics) at host:port, or the connection error's code ('timeout' after `timeoutMs`). */
function scrape(host: string, port: number, path = '/metrics', timeoutMs = 5000): Promise<number | string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port }, () => socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`));
    let text = '';
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    socket.on('close', () => resolve(text === '' ? 'closed' : Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0)));
    // A port that was free when picked may since belong to another test's process (a Redis Cluster
    // bus port never answers HTTP): give up instead of hanging.
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      resolve('timeout');
    });
  });
}

/** Nothing of ours answers there: refused, or (a port reused by another test's process) not our 200. */
function notServed(result: number | string): boolean {
  return result === 'ECONNREFUSED' || (result !== 200 && result !== 0);
}

describe('metrics port', () => {
  it('listens on metrics-bind (127.0.0.1 by default), not on the bind addresses', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--bind', '127.0.0.2', '--metrics-port', String(metricsPort)] });
    try {
      expect(await scrape('127.0.0.1', metricsPort)).toBe(200);
      expect(notServed(await scrape('127.0.0.2', metricsPort))).toBe(true);
      expect(s.logs.some((l) => l.includes(`Prometheus metrics on port ${metricsPort} (/metrics) of 127.0.0.1`))).toBe(true);
    } finally {
      await s.stop();
    }
    const other = await freePort();
    const t = await startServer({ args: ['--metrics-port', String(other), '--metrics-bind', '127.0.0.3'] });
    try {
      expect(await scrape('127.0.0.3', other)).toBe(200);
      expect(notServed(await scrape('127.0.0.1', other))).toBe(true);
    } finally {
      await t.stop();
    }
  });

  it('idle connections to the metrics port are capped: the server closes those beyond the cap, its descriptors stay bounded, scrapes work after', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    const idle: RawConnection[] = [];
    try {
      const pid = s.proc.pid!;
      const fdsBefore = readdirSync(`/proc/${pid}/fd`).length;
      for (let i = 0; i < 100; i++) idle.push(await RawConnection.open(metricsPort, { allowHalfOpen: true }));
      // Those beyond the cap (16 served, 48 that would be answered 503) are closed by the server
      // (this side never closes them).
      await waitFor(() => idle.filter((c) => c.ended).length >= 100 - 64, 'the connections beyond the cap closed');
      expect(idle.filter((c) => c.ended).length).toBeGreaterThanOrEqual(100 - 64);
      await waitFor(() => readdirSync(`/proc/${pid}/fd`).length <= fdsBefore + 64, 'their descriptors released');
      expect(readdirSync(`/proc/${pid}/fd`).length).toBeLessThanOrEqual(fdsBefore + 64);
      for (const c of idle) c.destroy();
      let status: number | string = 0;
      for (let i = 0; i < 100 && status !== 200; i++) {
        status = await scrape('127.0.0.1', metricsPort);
        if (status !== 200) await delay(20);
      }
      expect(status).toBe(200);
    } finally {
      for (const c of idle) c.destroy();
      await s.stop();
    }
  });
});

/** The value of a sample without labels in a scrape of the metrics port. */
async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { connection: 'close' }, signal: AbortSignal.timeout(5000) })).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (m === null) throw new Error(`${name} not in the scrape`);
  return Number(m[1]);
}

/** Opens a connection that never sends anything. */
function idleConnection(port: number): Promise<RawConnection> {
  return RawConnection.open(port, { allowHalfOpen: true });
}

/** Opens a connection that sends a request line and then a header line every `everyMs`, never ending them. */
async function slowLoris(port: number, everyMs: number): Promise<{ conn: RawConnection; stop(): void }> {
  const conn = await RawConnection.open(port, { allowHalfOpen: true });
  await conn.write('GET /metrics HTTP/1.1\r\nHost: x\r\n');
  let n = 0;
  const timer = setInterval(() => {
    if (conn.ended) return clearInterval(timer);
    void conn.write(`X-Drip-${n++}: y\r\n`);
  }, everyMs);
  return { conn, stop: () => clearInterval(timer) };
}

/** Opens a connection that makes one keep-alive request, reads its response, and then sends nothing. */
async function keptAlive(port: number): Promise<RawConnection> {
  const conn = await RawConnection.open(port, { allowHalfOpen: true });
  await conn.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await conn.waitFor(() => conn.text().endsWith('\r\n0\r\n\r\n') || conn.ended, 5000, 'the keep-alive response (chunked)');
  return conn;
}

describe('a request\'s headers are bounded', () => {
  it('64 KiB of headers, and headers that never end: 431 and closed at 16 KiB, the port still answers', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort), '--metrics-timeout', '60000'] });
    try {
      const big = await RawConnection.open(metricsPort, { allowHalfOpen: true });
      await big.write(`GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(64 * 1024)}\r\n\r\n`);
      await big.waitForEnd(10_000);
      expect(big.text()).toMatch(/^HTTP\/1\.1 431 /);
      // Never ending: header lines sent until the server closes (bounded here by a count).
      const endless = await RawConnection.open(metricsPort, { allowHalfOpen: true });
      await endless.write('GET /metrics HTTP/1.1\r\nHost: x\r\n');
      for (let i = 0; i < 1000 && !endless.ended; i++) await endless.write(`X-Line-${i}: ${'v'.repeat(100)}\r\n`).catch(() => undefined);
      await endless.waitForEnd(10_000);
      expect(endless.text()).toMatch(/^HTTP\/1\.1 431 /);
      expect(await scrape('127.0.0.1', metricsPort, '/healthz', 5000)).toBe(200);
      big.destroy();
      endless.destroy();
    } finally {
      await s.stop();
    }
  });
});

describe('nobody can hold the metrics port', () => {
  it('20 idle connections, 4 slow-loris senders and 3 kept-alive connections, re-opened as they are closed: every /healthz probe is answered 200', async () => {
    const metricsPort = await freePort();
    // Timeouts far longer than the test: only making room for new connections can answer the probes.
    const s = await startServer({ args: ['--metrics-port', String(metricsPort), '--metrics-timeout', '60000'] });
    const idle: RawConnection[] = [];
    const loris: { conn: RawConnection; stop(): void }[] = [];
    const alive: RawConnection[] = [];
    let reopened = 0;
    let attacking = true;
    try {
      for (let i = 0; i < 20; i++) idle.push(await idleConnection(metricsPort));
      for (let i = 0; i < 4; i++) loris.push(await slowLoris(metricsPort, 50));
      for (let i = 0; i < 3; i++) alive.push(await keptAlive(metricsPort));
      // The attacker keeps its connections open: every 20 ms, each one the server closed is opened again.
      const topUp = (async () => {
        while (attacking && reopened < 2000) {
          await delay(20);
          for (let i = 0; i < idle.length && attacking; i++) {
            if (!idle[i].ended) continue;
            idle[i].destroy();
            idle[i] = await idleConnection(metricsPort);
            reopened++;
          }
          for (let i = 0; i < loris.length && attacking; i++) {
            if (!loris[i].conn.ended) continue;
            loris[i].stop();
            loris[i].conn.destroy();
            loris[i] = await slowLoris(metricsPort, 50);
            reopened++;
          }
        }
      })();
      const PROBES = 20;
      const statuses: (number | string)[] = [];
      for (let i = 0; i < PROBES; i++) {
        // As a kubelet probe: a new connection each time, given up after 2 s.
        statuses.push(await scrape('127.0.0.1', metricsPort, '/healthz', 2000));
        await delay(25);
      }
      attacking = false;
      await topUp;
      console.log(`[attack] metrics port held by 27 connections (idle, slow-loris, kept alive; ${reopened} re-opened): ` +
        `${statuses.filter((x) => x === 200).length}/${PROBES} /healthz probes answered 200`);
      expect(statuses).toEqual(Array(PROBES).fill(200));
      const evicted = await metric(metricsPort, 'cellgate_metrics_connections_evicted_total');
      console.log(`[attack] metrics port: ${evicted} connections moved out of the served share to make room`);
      // Those beyond the 16 served made room (they would be told 503 if they sent a request).
      expect(evicted).toBeGreaterThanOrEqual(27 - 16);
    } finally {
      attacking = false;
      for (const c of idle) c.destroy();
      for (const l of loris) {
        l.stop();
        l.conn.destroy();
      }
      for (const c of alive) c.destroy();
      await s.stop();
    }
  }, 60_000);

  it('metrics-timeout closes connections that send nothing, drip their headers or stay idle after a response', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort), '--metrics-timeout', '300'] });
    let loris: { conn: RawConnection; stop(): void } | null = null;
    const conns: RawConnection[] = [];
    try {
      const silent = await idleConnection(metricsPort);
      loris = await slowLoris(metricsPort, 50);
      const kept = await keptAlive(metricsPort);
      conns.push(silent, loris.conn, kept);
      // Three connections, well under the cap: whatever closes them is the timeout, not room-making.
      await Promise.all(conns.map((c) => c.waitForEnd(10_000)));
      // The slow-loris was still sending when the server gave up on its headers.
      expect(loris.conn.text()).toMatch(/^(HTTP\/1\.1 408 |$)/);
      expect(await metric(metricsPort, 'cellgate_metrics_connections_evicted_total')).toBe(0);
    } finally {
      loris?.stop();
      for (const c of conns) c.destroy();
      await s.stop();
    }
  });

  it(`a kept-alive connection serves at most ${100} requests, the last with Connection: close, then it is closed`, async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort), '--metrics-timeout', '60000'] });
    const conn = await RawConnection.open(metricsPort);
    try {
      for (let i = 1; i <= 100; i++) {
        await conn.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
        await conn.waitFor(() => conn.text().split('\r\n0\r\n\r\n').length > i || conn.ended, 5000, `response ${i}`);
      }
      await conn.waitForEnd();
      const responses = conn.text().split('HTTP/1.1 ').slice(1);
      expect(responses.length).toBe(100);
      expect(responses.every((r) => r.startsWith('200 OK'))).toBe(true);
      expect(responses.slice(0, 99).every((r) => /\r\nConnection: keep-alive\r\n/i.test(r))).toBe(true);
      expect(responses[99]).toMatch(/\r\nConnection: close\r\n/i);
    } finally {
      conn.destroy();
      await s.stop();
    }
  });
});
