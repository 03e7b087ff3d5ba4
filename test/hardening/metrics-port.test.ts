/**
 * The metrics port: it listens on `metrics-bind` (loopback by default), not on the server's `bind`
 * addresses, and idle connections to it cannot take descriptors without bound (a connection cap).
 * 127.0.0.2 and 127.0.0.3 are loopback addresses too (Linux routes 127/8 to lo): they stand for
 * "an address other than the default" without leaving the machine.
 */
import { readdirSync } from 'node:fs';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { freePort, startServer } from '../helpers/server.js';
import { RawConnection } from '../helpers/raw.js';

/** The HTTP status of GET /metrics at host:port, or the connection error's code. */
function scrape(host: string, port: number): Promise<number | string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port }, () => socket.write(`GET /metrics HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`));
    let text = '';
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    socket.on('close', () => resolve(text === '' ? 'closed' : Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0)));
    // A port that was free when picked may since belong to another test's process (a Redis Cluster
    // bus port never answers HTTP): give up instead of hanging.
    socket.setTimeout(5000, () => {
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
      // Those beyond the cap are closed by the server (this side never closes them).
      for (let i = 0; i < 300 && idle.filter((c) => c.ended).length < 100 - 16; i++) await delay(20);
      expect(idle.filter((c) => c.ended).length).toBeGreaterThanOrEqual(100 - 16);
      for (let i = 0; i < 300 && readdirSync(`/proc/${pid}/fd`).length > fdsBefore + 16; i++) await delay(20);
      expect(readdirSync(`/proc/${pid}/fd`).length).toBeLessThanOrEqual(fdsBefore + 16);
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
