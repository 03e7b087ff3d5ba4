/**
 * Clients that never authenticate cannot pin much memory: before AUTH the query buffer holds at
 * most one allowed pre-auth request (~160 KiB) and at most 64 KiB of replies may wait for a client
 * that does not read; past that it is closed. 300 such clients send junk (inline lines and RESP
 * commands, each answered -NOAUTH) and never read; the server's RSS (VmRSS) must grow by less than
 * 300 KiB per client (counted bytes, generous), and every one of them must be closed or within the
 * bounds.
 */
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { startServer } from '../helpers/server.js';
import { Checker, mbulk, processAlive } from '../helpers/raw.js';

const FLOODERS = 300;
/** Bytes each flooder sends (the same buffers written again and again: nothing is copied here). */
const SEND_BYTES = 4 * 1024 * 1024;

function vmRss(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
  return Number(m![1]) * 1024;
}

const INLINE_JUNK = Buffer.from('GET some-key-that-needs-auth\r\n'.repeat(8192), 'latin1');
const RESP_JUNK = Buffer.concat(Array.from({ length: 2048 }, () => mbulk('CL.THROTTLE', 'k', '5', '10', '60')));

function flood(port: number, junk: Buffer): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' }, () => {
      socket.off('error', reject);
      socket.on('error', () => {}); // EPIPE/ECONNRESET once the server closes it
      socket.pause(); // never read a reply
      for (let sent = 0; sent < SEND_BYTES; sent += junk.length) socket.write(junk);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

interface ClientRow {
  qbuf: number;
  omem: number;
  cmd: string;
}

async function flooders(checker: Checker): Promise<ClientRow[]> {
  const list = String(await checker.call('CLIENT', 'LIST'));
  return list
    .split('\n')
    .filter((l) => l.includes(' id=') || l.startsWith('id='))
    .map((l) => ({ qbuf: Number(/ qbuf=(\d+)/.exec(l)![1]), omem: Number(/ omem=(\d+)/.exec(l)![1]), cmd: / cmd=(\S+)/.exec(l)![1] }))
    .filter((c) => !c.cmd.startsWith('client'));
}

describe('unauthenticated clients', () => {
  it(`${FLOODERS} clients sending junk without reading: bounded memory per client, each closed or bounded`, async () => {
    const server = await startServer({ args: ['--requirepass', 'pw'] });
    const pid = server.proc.pid!;
    const checker = await Checker.open(server.port);
    expect(await checker.call('AUTH', 'pw')).toBe('OK');
    await checker.call('DEBUG', 'GC');
    const before = vmRss(pid);
    const sockets: net.Socket[] = [];
    try {
      for (let i = 0; i < FLOODERS; i++) sockets.push(await flood(server.port, i % 2 === 0 ? INLINE_JUNK : RESP_JUNK));
      // Wait until the server has done what it will do with them: every flooder closed, or nothing
      // changing any more (bounded: before the bounds existed they stayed, paused at 1 MiB each).
      let last = '';
      for (let stable = 0, i = 0; stable < 10 && i < 300; i++) {
        await delay(50);
        const rows = await flooders(checker);
        const now = JSON.stringify(rows.map((r) => [r.qbuf, r.omem]));
        stable = rows.length === 0 || now === last ? stable + 1 : 0;
        last = now;
      }
      const after = vmRss(pid);
      const perClient = (after - before) / FLOODERS;
      const remaining = await flooders(checker);
      console.log(`[preauth] ${FLOODERS} junk senders: VmRSS +${((after - before) / 1048576).toFixed(1)} MiB (${(perClient / 1024).toFixed(1)} KiB per client), ${remaining.length} still connected`);
      expect(perClient).toBeLessThan(300 * 1024);
      for (const row of await flooders(checker)) {
        expect(row.qbuf).toBeLessThanOrEqual(170 * 1024);
        expect(row.omem).toBeLessThanOrEqual(64 * 1024 + 4096);
      }
      expect(processAlive(server)).toBe(true);
      expect(await checker.call('PING')).toBe('PONG');
    } finally {
      for (const s of sockets) s.destroy();
      checker.close();
      await server.stop();
    }
  }, 120_000);
});
