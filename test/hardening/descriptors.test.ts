/**
 * Descriptor exhaustion: the server runs under a low `ulimit -n` (prlimit), so maxclients is capped
 * to what the limit allows (as Redis does, with its warning), a flood of idle connections beyond the
 * limit is refused and closed for good, and with every descriptor taken the server keeps serving
 * its connected clients (INFO included), a background save fails cleanly and the periodic task goes
 * on. Counts and states only, no timings.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { startServer } from '../helpers/server.js';
import { Checker, infoField, mbulk, processAlive, RawConnection } from '../helpers/raw.js';

const hasPrlimit = spawnSync('sh', ['-c', 'command -v prlimit'], { encoding: 'utf8' }).status === 0;
const LIMIT = 256;
const FLOOD = 400;

function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** Resolves once `check()` holds, polling every 20 ms; fails after `timeoutMs` (a bound, not a measurement). */
async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

describe('descriptor limit', () => {
  it(`${FLOOD} idle connections under ulimit -n ${LIMIT}: maxclients capped, refused sockets closed by the server, then AUTH, writes and SHUTDOWN work`, async (ctx) => {
    if (!hasPrlimit) ctx.skip('prlimit is not installed');
    const s = await startServer({ wrap: ['prlimit', `--nofile=${LIMIT}:${LIMIT}`, '--'], args: ['--requirepass', 'pw'] });
    const flood: RawConnection[] = [];
    try {
      const warning = s.logs.find((l) => l.includes('maxclients has been reduced to'));
      expect(warning).toBeDefined();
      expect(warning).toContain('You requested maxclients of 10000 requiring at least');
      const admin = await Checker.open(s.port);
      expect(await admin.call('AUTH', 'pw')).toBe('OK');
      const cap = Number(((await admin.call('CONFIG', 'GET', 'maxclients')) as string[])[1]);
      expect(cap).toBeGreaterThan(100);
      expect(cap).toBeLessThan(LIMIT - 32);
      expect(warning).toContain(`maxclients has been reduced to ${cap} to compensate for low ulimit`);
      // CONFIG SET cannot go beyond the cap either (Redis's updateMaxclients text); the value stays.
      expect(await admin.call('CONFIG', 'SET', 'maxclients', '100000')).toEqual({
        error: `ERR CONFIG SET failed (possibly related to argument 'maxclients') - The operating system is not able to handle the specified number of clients, try with ${cap}`,
      });
      expect(((await admin.call('CONFIG', 'GET', 'maxclients')) as string[])[1]).toBe(String(cap));

      // The flood: idle connections that never send AUTH; allowHalfOpen keeps our side open after
      // the server's FIN, so only a real close on the server side ends them.
      for (let i = 0; i < FLOOD; i++) {
        const conn = await RawConnection.open(s.port, { allowHalfOpen: true }).catch(() => null);
        if (conn !== null) flood.push(conn);
      }
      expect(processAlive(s)).toBe(true);
      const refusedText = '-ERR max number of clients reached\r\n';
      await until(() => flood.filter((c) => c.text() === refusedText && c.ended).length >= FLOOD - cap, 20_000, 'the refused connections to get their error and FIN');
      const refused = flood.filter((c) => c.text() === refusedText);
      expect(refused.length).toBeGreaterThanOrEqual(FLOOD - cap);
      // Fully closed by the server, not half-open: writes from the peer meet a reset (the write after
      // it fails with EPIPE), so the socket closes although this side never closed it. A half-open
      // socket on the server would take the bytes into its receive buffer, forever.
      await until(async () => {
        for (const c of refused) if (!c.closed) await c.write('PING\r\n');
        return refused.every((c) => c.closed);
      }, 20_000, 'the refused sockets to be closed by the server');
      expect(openFds(s.proc.pid!)).toBeLessThan(LIMIT);
      const info = await admin.call('INFO', 'stats');
      expect(Number(infoField(info, 'rejected_connections'))).toBeGreaterThanOrEqual(FLOOD - cap);
      expect(processAlive(s)).toBe(true);

      for (const c of flood) c.destroy();
      await until(async () => Number(infoField(await admin.call('INFO', 'clients'), 'connected_clients')) === 1, 20_000, 'the flood to be gone');
      // A new client is served and a final snapshot is saved.
      const clientConn = await RawConnection.open(s.port);
      const client = Checker.wrap(clientConn);
      expect(await client.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
      expect(await client.call('AUTH', 'pw')).toBe('OK');
      expect(((await client.call('CL.THROTTLE', 'fd:k', '5', '10', '60')) as number[])[0]).toBe(0);
      const exited = new Promise<number | null>((resolve) => s.proc.once('exit', (code) => resolve(code)));
      await clientConn.write(mbulk('SHUTDOWN'));
      expect(await exited).toBe(0);
      expect(existsSync(join(s.dir, 'cellgate.snap'))).toBe(true);
      expect(s.logs.some((l) => l.includes('DB saved on disk: 1 keys'))).toBe(true);
    } finally {
      for (const c of flood) c.destroy();
      await s.stop();
    }
  }, 90_000);

  it('descriptors exhausted under a running server (soft limit lowered): INFO still answers, a BGSAVE fails cleanly, the server survives, and the connections that came meanwhile are closed or served once descriptors are back', async (ctx) => {
    if (!hasPrlimit) ctx.skip('prlimit is not installed');
    const s = await startServer({ args: ['--hz', '50'] });
    const pid = s.proc.pid!;
    try {
      const admin = await Checker.open(s.port);
      expect(await admin.call('CL.THROTTLE', 'fd:k1', '5', '10', '60')).toEqual([0, 6, 5, -1, 6]);
      expect(await admin.call('INFO', 'memory')).toMatch(/used_memory:\d+/);
      // Lower the soft limit below what the process holds: every open() now fails with EMFILE,
      // process.memoryUsage() (it reads /proc/self/stat) and the snapshot's temp file included.
      const held = openFds(pid);
      const lowered = spawnSync('prlimit', ['--pid', String(pid), `--nofile=${held - 2}:${20000}`], { encoding: 'utf8' });
      if (lowered.status !== 0) ctx.skip(`prlimit --pid failed: ${lowered.stderr}`);
      // New connections cannot be accepted (no descriptor) while the existing one works.
      const refused: RawConnection[] = [];
      try {
        for (let i = 0; i < 5; i++) {
          const c = await RawConnection.open(s.port).catch(() => null);
          if (c !== null) refused.push(c);
        }
        // INFO is a ready check: it answers whole (memory figures as last measured).
        const info = String(await admin.call('INFO'));
        expect(info).toMatch(/used_memory:\d+/);
        expect(info).toMatch(/loading:0/);
        // A background save cannot open its temp file: it fails, is reported, and writes go on.
        expect(await admin.call('BGSAVE')).toBe('Background saving started');
        await until(async () => infoField(await admin.call('INFO', 'persistence'), 'rdb_last_bgsave_status') === 'err', 20_000, 'the failed BGSAVE');
        expect(await admin.call('CL.THROTTLE', 'fd:k1', '5', '10', '60')).toEqual([0, 6, 4, -1, 12]);
        // The periodic task keeps running meanwhile (idle clients are timed out by it, expiry runs).
        const ticksBefore = Number(infoField(await admin.call('INFO', 'stats'), 'periodic_task_runs'));
        await until(async () => Number(infoField(await admin.call('INFO', 'stats'), 'periodic_task_runs')) >= ticksBefore + 5, 20_000, 'periodic ticks');
        expect(processAlive(s)).toBe(true);
      } finally {
        spawnSync('prlimit', ['--pid', String(pid), '--nofile=20000:20000']);
      }
      // None is left hanging: libuv closes one it had no descriptor for (its reserved-descriptor
      // trick, which holds only while its reserve can be opened again), and one still in the
      // backlog is accepted and served now that descriptors are back.
      for (const c of refused) {
        await c.write('PING\r\n').catch(() => undefined);
        await c.waitFor(() => c.closed || c.text().includes('+PONG'), 20_000, 'the connection closed or served');
      }
      // Descriptors are back: the server serves new clients, saves, and SHUTDOWN saves.
      const client = await Checker.open(s.port);
      expect(await client.call('CL.THROTTLE', 'fd:k2', '5', '10', '60')).toEqual([0, 6, 5, -1, 6]);
      expect(await client.call('SAVE')).toBe('OK');
      expect(processAlive(s)).toBe(true);
      expect(await s.stop()).toBe(0);
    } finally {
      await s.stop();
    }
  }, 60_000);
});
