/**
 * One memory account per client (src/server/client-memory.ts, docs/security.md): MULTI queues counted
 * at their real size, maxmemory-clients closing the biggest clients, the WATCH cap, big watch sets
 * freed in slices, capped client names. Each finding of the adversarial round is reproduced here,
 * bounded in count and time; CELLGATE_SOAK=1 runs the larger variants. Peak RSS figures are printed
 * as `[attack]` lines (VmHWM of the server process), not asserted.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, infoField, mbulk, parseReplies, processAlive, startPingProbe } from '../helpers/raw.js';
import { RedisNode } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const QUEUED = '+QUEUED\r\n'.length;

let server: RunningServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

function peakRssMiB(s: RunningServer): number {
  const status = readFileSync(`/proc/${s.proc.pid}/status`, 'utf8');
  return Math.round(Number(/VmHWM:\s+(\d+)/.exec(status)![1]) / 1024);
}

async function info(c: Checker, section: string, field: string): Promise<number> {
  return Number(infoField(await c.call('INFO', section), field));
}

function clientField(line: string, field: string): number {
  return Number(new RegExp(` ${field}=(-?\\d+)`).exec(line)![1]);
}

/** A DEL of `n` keys of 10 bytes: ~18 bytes a key on the wire, 14 in a queue. */
function bigDel(n: number, tag: string): Buffer {
  return mbulk('DEL', ...Array.from({ length: n }, (_, i) => `${tag}${String(i).padStart(9, '0')}`));
}

/** A connection in MULTI that queues `command` in batches until the server closes it or `max` are queued. */
class Grower {
  queued = 0;
  private constructor(readonly conn: RawConnection, readonly id: number) {}

  static async open(port: number): Promise<Grower> {
    const conn = await RawConnection.open(port);
    const c = Checker.wrap(conn);
    const id = (await c.call('CLIENT', 'ID')) as number;
    expect(await c.call('MULTI')).toBe('OK');
    return new Grower(conn, id);
  }

  /** Queues `batch` more commands; false once the connection is closed. */
  async grow(command: Buffer, batch: number): Promise<boolean> {
    if (this.conn.ended) return false;
    const start = this.conn.length;
    await this.conn.write(Buffer.concat(Array(batch).fill(command)));
    await this.conn.waitFor(() => this.conn.ended || this.conn.length >= start + batch * QUEUED, 30_000, 'QUEUED replies');
    if (this.conn.ended) return false;
    this.queued += batch;
    return true;
  }
}

describe('MULTI queues at their real size, maxmemory-clients', () => {
  it('three clients queuing DELs of 100k keys within their query-buffer limit: the server lives, the clients over the limits are closed', async () => {
    // A heap of 128 MB, whose quarter is the default maxmemory-clients; the query-buffer limit is the
    // default 1gb, so only the sum of the accounts can stop these clients. Counted at a fraction of
    // their cost (as before the account), such queues grew the process until it died.
    server = await startServer({ env: { NODE_OPTIONS: '--max-old-space-size=128' } });
    const growers = await Promise.all([0, 1, 2].map(() => Grower.open(server!.port)));
    // 100,000 keys a command (1.8 MB on the wire): the queue copy of such a command cost ~29 MB of
    // heap when it was counted at ~1 MB.
    const command = bigDel(100_000, 'k');
    const maxEach = SOAK ? 400 : 32;
    let open = growers.slice();
    while (open.length > 0) {
      const still: Grower[] = [];
      for (const g of open) if (g.queued < maxEach && (await g.grow(command, 2))) still.push(g);
      open = still;
    }
    const peak = peakRssMiB(server);
    expect(processAlive(server)).toBe(true);
    // Every grower went over a limit and was closed (before the account, all three kept ~190 MB each).
    for (const g of growers) expect(g.conn.ended).toBe(true);
    const c = await Checker.open(server.port);
    expect(await c.call('PING')).toBe('PONG');
    const limit = await info(c, 'memory', 'maxmemory_clients');
    expect(limit).toBeGreaterThan(30 * 1024 * 1024);
    expect(limit).toBeLessThan(60 * 1024 * 1024);
    const evicted = await info(c, 'stats', 'evicted_clients');
    const qbufClosed = await info(c, 'stats', 'client_query_buffer_limit_disconnections');
    expect(evicted).toBeGreaterThanOrEqual(1);
    expect(evicted + qbufClosed).toBe(3);
    expect(qbufClosed).toBe(0);
    expect(server.logs.some((l) => l.includes('Evicting client: id='))).toBe(true);
    // Each grower got at least some of its queue before the limits: the account is not refusing everything.
    for (const g of growers) expect(g.queued).toBeGreaterThan(2);
    console.log(`[attack] 3 clients queuing DEL of 100k keys (128 MB heap): queued ${growers.map((g) => g.queued).join('/')}, ` +
      `evicted ${evicted}, query-buffer closed ${qbufClosed}, maxmemory-clients ${Math.round(limit / 2 ** 20)} MiB, peak RSS ${peak} MiB`);
    c.close();
  }, 120_000);

  it('the client that grows past maxmemory-clients is the one closed; the others keep their queues', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-clients', '8mb')).toBe('OK');
    const quiet = await Promise.all([0, 1].map(async (i) => {
      const q = await Checker.open(server!.port);
      expect(await q.call('CLIENT', 'SETNAME', `quiet-${i}`)).toBe('OK');
      expect(await q.call('MULTI')).toBe('OK');
      expect(await q.call('PING', 'x'.repeat(1000))).toBe('QUEUED');
      return q;
    }));
    const grower = await Grower.open(server.port);
    const command = bigDel(10_000, 'g');
    for (let i = 0; i < 200 && (await grower.grow(command, 5)); i++);
    expect(grower.conn.ended).toBe(true);
    // ~140 KB each in the account: closed between 8 MiB / 140 KB and that plus one batch.
    expect(grower.queued).toBeGreaterThan(40);
    expect(grower.queued).toBeLessThan(70);
    for (const q of quiet) expect(await q.call('EXEC')).toEqual(['x'.repeat(1000)]);
    expect(await info(c, 'stats', 'evicted_clients')).toBe(1);
    const line = server.logs.find((l) => l.includes('Evicting client: id='));
    expect(line).toContain(`id=${grower.id} `);
    expect(await info(c, 'clients', 'clients_total_memory')).toBeLessThan(1024 * 1024);
    for (const q of quiet) q.close();
    c.close();
  });

  it('a client with CLIENT NO-EVICT on is skipped, as in Redis: the others go first', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    expect(await c.call('CLIENT', 'NO-EVICT', 'on')).toBe('OK');
    const other = await RawConnection.open(server.port);
    expect(await Checker.wrap(other).call('PING')).toBe('PONG');
    const protectedGrower = await Grower.open(server.port);
    expect(await Checker.wrap(protectedGrower.conn).call('CLIENT', 'NO-EVICT', 'on')).toBe('QUEUED');
    expect(await Checker.wrap(protectedGrower.conn).call('EXEC')).toEqual(['OK']);
    expect(await Checker.wrap(protectedGrower.conn).call('MULTI')).toBe('OK');
    expect(await protectedGrower.grow(bigDel(10_000, 'e'), 20)).toBe(true);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-clients', '1mb')).toBe('OK');
    // The grower (2.8 MB) and the admin connection are exempt: the only other client goes.
    await other.waitForEnd();
    expect(await protectedGrower.grow(bigDel(10_000, 'e'), 5)).toBe(true);
    expect(await info(c, 'stats', 'evicted_clients')).toBe(1);
    protectedGrower.conn.destroy();
    c.close();
  });

  it('CLIENT LIST and INFO show the account: multi-mem and tot-mem follow the queue, watch counts keys', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    const me = String(await c.call('CLIENT', 'ID'));
    const line = async (): Promise<string> => String(await c.call('CLIENT', 'LIST', 'ID', me));
    const idle = await line();
    expect(clientField(idle, 'multi-mem')).toBe(0);
    expect(clientField(idle, 'watch')).toBe(0);
    expect(await c.call('WATCH', 'a', 'b', 'c', 'a')).toBe('OK');
    expect(clientField(await line(), 'watch')).toBe(3);
    expect(await info(c, 'clients', 'watching_clients')).toBe(1);
    expect(await info(c, 'clients', 'total_watched_keys')).toBe(3);
    expect(await c.call('MULTI')).toBe('OK');
    for (let i = 0; i < 100; i++) expect(await c.call('PING', 'p'.repeat(1000))).toBe('QUEUED');
    expect(await c.call('EXEC')).toHaveLength(100);
    // While queued, CLIENT LIST runs at EXEC (queued itself); check through another client instead.
    const other = await Checker.open(server.port);
    expect(await c.call('MULTI')).toBe('OK');
    for (let i = 0; i < 100; i++) expect(await c.call('PING', 'p'.repeat(1000))).toBe('QUEUED');
    const queuedLine = String(await other.call('CLIENT', 'LIST', 'ID', me));
    const multiMem = clientField(queuedLine, 'multi-mem');
    // 100 × 1,000 argument bytes plus the measured per-command cost (transaction.ts) and the arena
    // chunks' room not used yet (chunks double up to 64 KiB: at most one chunk's worth).
    expect(multiMem).toBeGreaterThan(100 * 1000);
    expect(multiMem).toBeLessThan(100 * 1000 + 70 * 1024);
    expect(clientField(queuedLine, 'tot-mem')).toBeGreaterThan(multiMem);
    expect(await info(other, 'clients', 'client_largest_memory')).toBe(clientField(String(await other.call('CLIENT', 'LIST', 'ID', me)), 'tot-mem'));
    expect(await c.call('DISCARD')).toBe('OK');
    expect(clientField(await line(), 'multi-mem')).toBe(0);
    other.close();
    c.close();
  });

  it('maxmemory-clients: CONFIG GET/SET in bytes or a percentage of maxmemory, errors as Redis', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    const byDefault = Number(((await c.call('CONFIG', 'GET', 'maxmemory-clients')) as string[])[1]);
    expect(byDefault).toBeGreaterThan(0);
    expect(await info(c, 'memory', 'maxmemory_clients')).toBe(byDefault);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-clients', '64mb')).toBe('OK');
    expect(await c.call('CONFIG', 'GET', 'maxmemory-clients')).toEqual(['maxmemory-clients', String(64 * 1024 * 1024)]);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-clients', '10%')).toBe('OK');
    expect(await c.call('CONFIG', 'GET', 'maxmemory-clients')).toEqual(['maxmemory-clients', '10%']);
    // A percentage of maxmemory 0 is off, as Redis.
    expect(await info(c, 'memory', 'maxmemory_clients')).toBe(0);
    expect(await c.call('CONFIG', 'SET', 'maxmemory', '100mb')).toBe('OK');
    expect(await info(c, 'memory', 'maxmemory_clients')).toBe(10 * 1024 * 1024);
    // Lowered under what a client holds: that client goes at once.
    const big = await Grower.open(server.port);
    expect(await big.grow(bigDel(10_000, 'c'), 20)).toBe(true);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-clients', '2mb')).toBe('OK');
    await big.conn.waitForEnd();
    expect(await info(c, 'stats', 'evicted_clients')).toBe(1);
    const bad = (await c.call('CONFIG', 'SET', 'maxmemory-clients', 'lots')) as { error: string };
    expect(bad.error).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'maxmemory-clients'\) - argument must be a memory or percent value$/);
    expect(((await c.call('CONFIG', 'SET', 'maxmemory-clients', '101%')) as { error: string }).error).toMatch(/percentage/);
    c.close();
  });
});

describe('backend calls in flight', () => {
  it('are in the account while the backend does not answer, and leave it when answered', async () => {
    const redis = await RedisNode.start();
    try {
      server = await startServer({ args: ['--backend', redis.url, '--backend-timeout', '60000'] });
      const c = await Checker.open(server.port);
      const caller = await RawConnection.open(server.port);
      const id = String(await Checker.wrap(caller).call('CLIENT', 'ID'));
      const totMem = async (): Promise<number> => clientField(String(await c.call('CLIENT', 'LIST', 'ID', id)), 'tot-mem');
      const idle = await totMem();
      redis.pause();
      const start = caller.length;
      await caller.write(Buffer.concat(Array.from({ length: 500 }, (_, i) => mbulk('CL.THROTTLE', `k${i}`, '5', '10', '60'))));
      // The calls are read and sent on (nothing answers): the account holds them (~3.2 KB each, client-memory.ts).
      let held = 0;
      await waitFor(async () => (held = await totMem()) >= idle + 500 * 3200, 'the 500 calls held in client memory');
      expect(held).toBeGreaterThanOrEqual(idle + 500 * 3200);
      redis.resume();
      await caller.waitFor(() => parseReplies(caller.received.subarray(start)).replies.length === 500, 20_000, '500 replies');
      await waitFor(async () => (await totMem()) <= idle + 1024, 'client memory back to idle');
      expect(await totMem()).toBeLessThanOrEqual(idle + 1024);
      caller.destroy();
      c.close();
    } finally {
      await redis.destroy();
    }
  }, 60_000);
});

describe('WATCH is bounded and big watch sets are freed in slices', () => {
  const KEYS = 100_000;

  async function watchMany(c: Checker, n: number, tag: string): Promise<void> {
    for (let i = 0; i < n; i += 10_000) {
      expect(await c.call('WATCH', ...Array.from({ length: Math.min(10_000, n - i) }, (_, j) => `${tag}${i + j}`))).toBe('OK');
    }
  }

  it('a WATCH past 100,000 keys per client is refused whole, nothing of it watched', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    await watchMany(c, KEYS, 'w');
    const before = await info(c, 'clients', 'total_watched_keys');
    expect(before).toBe(KEYS);
    const refused = (await c.call('WATCH', 'one-more', 'and-another')) as { error: string };
    expect(refused.error).toBe('ERR max number of watched keys reached (100000 per client)');
    expect(await info(c, 'clients', 'total_watched_keys')).toBe(KEYS);
    expect(clientField(String(await c.call('CLIENT', 'INFO')), 'watch')).toBe(KEYS);
    // Re-watching keys already watched is not more keys, but the check counts the arguments: refused too.
    expect(((await c.call('WATCH', 'w1')) as { error: string }).error).toMatch(/max number of watched keys/);
    // The transaction still works with the watches it has.
    expect(await c.call('MULTI')).toBe('OK');
    expect(await c.call('PING')).toBe('QUEUED');
    expect(await c.call('EXEC')).toEqual(['PONG']);
    c.close();
  }, 60_000);

  it('UNWATCH of 100,000 keys returns at once and frees them in slices while another client is served', async () => {
    server = await startServer();
    const a = await Checker.open(server.port);
    const b = await Checker.open(server.port);
    await watchMany(a, KEYS, 'u');
    const slicesBefore = await info(b, 'stats', 'lazyfree_watch_slices');
    // One batch: UNWATCH, INFO, a new WATCH, answered in the same turn: the index still holds every
    // watch, and they still count toward the client's cap (it cannot outrun the slices).
    const conn = (a as unknown as { conn: RawConnection }).conn;
    const start = conn.length;
    await conn.write(Buffer.concat([mbulk('UNWATCH'), mbulk('INFO', 'memory'), mbulk('WATCH', 'again')]));
    await conn.waitFor(() => /max number of watched keys/.test(conn.text().slice(start)), 10_000, 'INFO and WATCH after UNWATCH');
    const pendingRightAfter = Number(/lazyfree_pending_watches:(\d+)/.exec(conn.text().slice(start))![1]);
    expect(pendingRightAfter).toBe(KEYS);
    expect(await b.call('PING')).toBe('PONG');
    // A key watched before the UNWATCH changes now: the client that dropped it sees nothing of it.
    expect(((await b.call('CL.THROTTLE', 'u7', '5', '10', '60')) as number[])[0]).toBe(0);
    expect(await a.call('MULTI')).toBe('OK');
    expect(await a.call('PING')).toBe('QUEUED');
    expect(await a.call('EXEC')).toEqual(['PONG']);
    await waitFor(async () => (await info(b, 'memory', 'lazyfree_pending_watches')) === 0, 'lazyfree_pending_watches 0');
    expect(await info(b, 'memory', 'lazyfree_pending_watches')).toBe(0);
    expect(await info(b, 'clients', 'total_watched_keys')).toBe(0);
    // Freed: out of the account, and the cap is free again.
    expect(clientField(String(await a.call('CLIENT', 'INFO')), 'tot-mem')).toBeLessThan(64 * 1024);
    expect(await a.call('WATCH', 'again')).toBe('OK');
    // 100,000 watches in slices of 8,192: at least 13 slices, each its own event-loop turn.
    expect((await info(b, 'stats', 'lazyfree_watch_slices')) - slicesBefore).toBeGreaterThanOrEqual(Math.ceil(KEYS / 8192));
    a.close();
    b.close();
  }, 60_000);

  it('clients watching 100,000 keys each that disconnect: their watches go in slices too', async () => {
    server = await startServer();
    const n = SOAK ? 10 : 3;
    const watchers = await Promise.all(Array.from({ length: n }, () => Checker.open(server!.port)));
    const b = await Checker.open(server.port);
    for (const [i, w] of watchers.entries()) await watchMany(w, KEYS, `d${i}:`);
    expect(await info(b, 'clients', 'total_watched_keys')).toBe(n * KEYS);
    const slicesBefore = await info(b, 'stats', 'lazyfree_watch_slices');
    const probe = await startPingProbe(server.port, 1);
    for (const w of watchers) w.close();
    await waitFor(async () => (await info(b, 'clients', 'total_watched_keys')) === 0, 'total_watched_keys 0', undefined, 10);
    const pings = await probe.stop();
    expect(await info(b, 'clients', 'total_watched_keys')).toBe(0);
    expect((await info(b, 'stats', 'lazyfree_watch_slices')) - slicesBefore).toBeGreaterThanOrEqual(Math.ceil((n * KEYS) / 8192));
    expect(await info(b, 'clients', 'watching_clients')).toBe(0);
    console.log(`[attack] ${n} clients watching ${KEYS} keys each disconnect: ${await info(b, 'stats', 'lazyfree_watch_slices') - slicesBefore} slices, longest ${await info(b, 'stats', 'lazyfree_watch_slice_max_us')} µs; ` +
      `PING probe meanwhile: ${pings.count} answered, p99 ${pings.p99Ms.toFixed(2)} ms, max ${pings.maxMs.toFixed(2)} ms`);
    b.close();
  }, 120_000);
});

describe('client name and library fields are capped', () => {
  it('CLIENT SETNAME, HELLO SETNAME and CLIENT SETINFO refuse more than 4096 bytes; a huge name never stays', async () => {
    server = await startServer();
    const c = await Checker.open(server.port);
    expect(await c.call('CLIENT', 'SETNAME', 'n'.repeat(4096))).toBe('OK');
    const bytes = SOAK ? 200 * 1024 * 1024 : 20 * 1024 * 1024;
    const huge = Buffer.alloc(bytes, 0x6e);
    expect(((await c.call('CLIENT', 'SETNAME', huge)) as { error: string }).error).toBe('ERR Client names cannot be longer than 4096 bytes.');
    expect(((await c.call('HELLO', '3', 'SETNAME', 'n'.repeat(4097))) as { error: string }).error).toBe('ERR Client names cannot be longer than 4096 bytes.');
    expect(((await c.call('CLIENT', 'SETINFO', 'LIB-NAME', 'l'.repeat(4097))) as { error: string }).error).toBe('ERR lib-name cannot be longer than 4096 bytes.');
    expect(((await c.call('CLIENT', 'SETINFO', 'LIB-VER', 'v'.repeat(4097))) as { error: string }).error).toBe('ERR lib-ver cannot be longer than 4096 bytes.');
    expect(await c.call('CLIENT', 'GETNAME')).toBe('n'.repeat(4096));
    const live = String(await c.call('CLIENT', 'INFO'));
    expect(clientField(live, 'tot-mem')).toBeLessThan(64 * 1024);
    // Two collections, two round trips: the first may run while the huge argument's buffer is still referenced by the batch that read it.
    expect(await c.call('DEBUG', 'GC')).toBe('OK');
    expect(await c.call('DEBUG', 'GC')).toBe('OK');
    const used = await info(c, 'memory', 'used_memory_heap');
    expect(used).toBeLessThan(bytes);
    console.log(`[attack] CLIENT SETNAME of ${bytes / 2 ** 20} MiB refused: used_memory_heap after GC ${Math.round(used / 2 ** 20)} MiB, peak RSS ${peakRssMiB(server)} MiB`);
    c.close();
  }, 60_000);
});
