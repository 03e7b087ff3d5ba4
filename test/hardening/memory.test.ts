/**
 * maxmemory over TCP (docs/security.md): -OOM under noeviction, eviction by volatile-ttl (the
 * default), allkeys-lru and allkeys-random, INFO's memory fields and evicted_keys, eviction in
 * bounded steps, convergence at a lowered limit, and client buffers kept out of what is limited.
 *
 * maxmemory is compared with INFO's `used_memory` (= `used_memory_counted_for_evict`: startup +
 * dataset, counted exactly: src/server/memory.ts), whose startup part is measured after a full GC; a
 * maxmemory below it is refused at CONFIG SET and at start. A key of at most 20 bytes costs exactly
 * one 64-byte record in it, and a key of at most 20 bytes costs exactly one 64-byte record in it, so
 * setting the limit to "counted − n × 64" evicts exactly n keys: the tests count keys, not bytes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { startServer, type RunningServer } from '../helpers/server.js';
import { runToExit } from '../helpers/replies.js';
import { Checker, RawConnection, infoField, mbulk, parseReplies, startPingProbe } from '../helpers/raw.js';

const OOM = "OOM command not allowed when used memory > 'maxmemory'.";
/** What a key of at most 20 bytes adds to used_memory_dataset: its record (src/keyspace/key-table.ts). */
const RECORD_BYTES = 64;

let server: RunningServer;
let c: Checker;
beforeEach(async () => {
  server = await startServer();
  c = await Checker.open(server.port);
});
afterEach(async () => {
  c.close();
  await server.stop();
});

/** Creates keys with one pipelined write per 10,000. */
async function fill(port: number, keys: string[], argsFor: (key: string) => string[]): Promise<void> {
  const conn = await RawConnection.open(port);
  try {
    for (let i = 0; i < keys.length; i += 10_000) {
      const batch = keys.slice(i, i + 10_000);
      const start = conn.length;
      await conn.write(Buffer.concat(batch.map((k) => mbulk(...argsFor(k)))));
      await conn.waitFor(() => parseReplies(conn.received.subarray(start)).replies.length >= batch.length, 20_000, 'fill replies');
    }
  } finally {
    conn.destroy();
  }
}

async function stat(section: string, field: string): Promise<number> {
  return Number(infoField(await c.call('INFO', section), field));
}

/** Sets maxmemory so that exactly `evict` keys (of at most 20 bytes) must go. */
async function limitToEvict(evict: number): Promise<void> {
  const counted = await stat('memory', 'used_memory_counted_for_evict');
  expect(counted).toBeGreaterThan(evict * RECORD_BYTES);
  expect(await c.call('CONFIG', 'SET', 'maxmemory', String(counted - evict * RECORD_BYTES))).toBe('OK');
}

async function waitForEvictions(atLeast: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await stat('stats', 'evicted_keys')) < atLeast) {
    if (Date.now() > deadline) {
      const memory = String(await c.call('INFO', 'memory'));
      throw new Error(`fewer than ${atLeast} evictions after 10 s: evicted_keys ${await stat('stats', 'evicted_keys')}, dbsize ${await c.call('DBSIZE')}, ` +
        `counted ${infoField(memory, 'used_memory_counted_for_evict')}, maxmemory ${infoField(memory, 'maxmemory')}, used_memory ${infoField(memory, 'used_memory')}`);
    }
    await delay(20);
  }
}

async function surviving(keys: string[]): Promise<number> {
  let n = 0;
  for (let i = 0; i < keys.length; i += 1000) n += (await c.call('EXISTS', ...keys.slice(i, i + 1000))) as number;
  return n;
}

describe('maxmemory', () => {
  it('INFO has used_memory, used_memory_rss, the counted figures, maxmemory, maxmemory_policy, evicted_keys', async () => {
    let memory = String(await c.call('INFO', 'memory'));
    for (const f of ['used_memory', 'used_memory_rss', 'used_memory_heap', 'maxmemory', 'used_memory_startup', 'used_memory_dataset', 'used_memory_counted_for_evict',
      'mem_not_counted_for_evict', 'mem_clients_normal', 'eviction_step_max_keys']) expect(Number(infoField(memory, f))).toBeGreaterThanOrEqual(0);
    const counted = (m: string): number => Number(infoField(m, 'used_memory_counted_for_evict'));
    const dataset = (m: string): number => Number(infoField(m, 'used_memory_dataset'));
    expect(counted(memory)).toBe(Number(infoField(memory, 'used_memory_startup')) + dataset(memory));
    // One figure: INFO used_memory is what maxmemory is compared with.
    expect(Number(infoField(memory, 'used_memory'))).toBe(counted(memory));
    // Counted exactly: 1000 short keys add 1000 records (the index table does not grow below 716 keys).
    const before = dataset(memory);
    await fill(server.port, Array.from({ length: 1000 }, (_, i) => `d:${i}`), (k) => ['RL.TOKENBUCKET', k, '10', '3600000']);
    memory = String(await c.call('INFO', 'memory'));
    expect(dataset(memory) - before).toBe(1000 * RECORD_BYTES + 1024 * 4); // and the table doubled once (1024 → 2048 entries)
    expect(await c.call('DEL', 'd:1', 'd:2')).toBe(2);
    expect(dataset(String(await c.call('INFO', 'memory')))).toBe(dataset(memory) - 2 * RECORD_BYTES);
    expect(infoField(memory, 'maxmemory_policy')).toBe('volatile-ttl');
    expect(infoField(await c.call('INFO', 'stats'), 'evicted_keys')).toBe('0');
  });

  it('noeviction: limiter commands get -OOM, others still run', async () => {
    await fill(server.port, ['a', 'b'], (k) => ['RL.TOKENBUCKET', k, '10', '60000']);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-policy', 'noeviction', 'maxmemory', String(await stat('memory', 'used_memory_startup')))).toBe('OK');
    expect(await c.call('CL.THROTTLE', 'x', '5', '10', '60')).toEqual({ error: OOM });
    expect(await c.call('RL.TOKENBUCKET', 'a', '10', '60000')).toEqual({ error: OOM });
    expect(await c.call('GCRA', 'x', '5', '10', '60')).toEqual({ error: OOM });
    expect(await c.call('PING')).toBe('PONG');
    expect(await c.call('EXISTS', 'a', 'b')).toBe(2);
    expect(await c.call('DEL', 'a')).toBe(1);
    expect(infoField(await c.call('INFO', 'errorstats'), 'errorstat_OOM')).toBe('count=3');
    expect(await stat('stats', 'evicted_keys')).toBe(0);
    expect(await c.call('CONFIG', 'SET', 'maxmemory', '0')).toBe('OK');
    expect(((await c.call('CL.THROTTLE', 'x', '5', '10', '60')) as number[])[0]).toBe(0);
  });

  it('volatile-ttl (default) evicts the keys closest to refilling', async () => {
    // Short keys refill in 1 s, long ones in 1 h: evicting a short key forgets almost nothing. The
    // clock is frozen so that nothing expires meanwhile.
    await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    const short = Array.from({ length: 20_000 }, (_, i) => `short:${i}`);
    const long = Array.from({ length: 20_000 }, (_, i) => `long:${i}`);
    await fill(server.port, short, (k) => ['RL.TOKENBUCKET', k, '10', '1000']);
    await fill(server.port, long, (k) => ['RL.TOKENBUCKET', k, '10', '3600000']);
    await limitToEvict(10_000);
    await waitForEvictions(10_000);
    expect(await c.call('DBSIZE')).toBe(30_000);
    const longLeft = await surviving(long);
    const shortLeft = await surviving(short);
    expect(longLeft).toBeGreaterThan(19_800);
    expect(shortLeft).toBeLessThan(19_000);
    // Writes keep working: each one evicts what it needs.
    expect(((await c.call('RL.TOKENBUCKET', 'new', '10', '1000')) as number[])[0]).toBe(0);
  });

  it('allkeys-lru keeps the recently used keys', async () => {
    await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    const cold = Array.from({ length: 18_000 }, (_, i) => `cold:${i}`);
    const hot = Array.from({ length: 2000 }, (_, i) => `hot:${i}`);
    await fill(server.port, [...cold, ...hot], (k) => ['RL.FIXEDWINDOW', k, '10', '3600000']);
    await c.call('DEBUG', 'CLOCK', 'ADVANCE', '60000');
    expect(await surviving(hot)).toBe(2000); // EXISTS touches them a minute later (fixed windows of 1 h: nothing expires)
    expect(await c.call('CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru')).toBe('OK');
    await limitToEvict(10_000);
    await waitForEvictions(10_000);
    expect(await surviving(hot)).toBeGreaterThan(1980);
    expect(await surviving(cold)).toBeLessThan(17_000);
  });

  it('allkeys-random evicts from all keys', async () => {
    await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    const a = Array.from({ length: 10_000 }, (_, i) => `a:${i}`);
    const b = Array.from({ length: 10_000 }, (_, i) => `b:${i}`);
    await fill(server.port, a, (k) => ['RL.TOKENBUCKET', k, '10', '1000']);
    await fill(server.port, b, (k) => ['RL.TOKENBUCKET', k, '10', '3600000']);
    expect(await c.call('CONFIG', 'SET', 'maxmemory-policy', 'allkeys-random')).toBe('OK');
    await limitToEvict(10_000);
    await waitForEvictions(10_000);
    const lostA = 10_000 - (await surviving(a));
    const lostB = 10_000 - (await surviving(b));
    expect(lostA + lostB).toBe(10_000);
    expect(lostA).toBeGreaterThan(2000);
    expect(lostB).toBeGreaterThan(2000);
  });

  it('evicts 100,000 keys in bounded steps, answering between them, then refuses writes with nothing left', async () => {
    const keys = Array.from({ length: 100_000 }, (_, i) => `k:${i}`);
    await fill(server.port, keys, (k) => ['RL.TOKENBUCKET', k, '10', '3600000']);
    const probe = await startPingProbe(server.port, 2);
    // The least maxmemory accepted: the empty server (a smaller one is refused, see below).
    expect(await c.call('CONFIG', 'SET', 'maxmemory', String(await stat('memory', 'used_memory_startup')))).toBe('OK');
    // Countable, not timed: eviction runs in steps of at most 16,384 keys chained behind pending I/O,
    // so 100,000 keys take at least 7 steps with clients served between them. (How many INFO calls
    // land part way depends on the machine's load, so it is not asserted.)
    for (let i = 0; i < 5000 && (await c.call('DBSIZE')) !== 0; i++) await stat('stats', 'evicted_keys');
    const pings = await probe.stop(); // throws if a PING went unanswered or wrong
    expect(await c.call('DBSIZE')).toBe(0);
    expect(await stat('stats', 'evicted_keys')).toBe(100_000);
    const step = await stat('memory', 'eviction_step_max_keys');
    expect(step).toBeGreaterThan(0);
    expect(step).toBeLessThanOrEqual(16_384); // EVICT_PER_STEP in src/server/memory.ts: at least 7 steps
    expect(pings.count).toBeGreaterThan(0);
    // Nothing left to evict, and still over: the index table grown for 100,000 keys stays counted.
    expect(await c.call('RL.TOKENBUCKET', 'k', '10', '1000')).toEqual({ error: OOM });
  });

  it('converges at a lowered limit: 300,000 keys, room for 150,000 → 150,000 kept and calls succeed', async () => {
    await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    const keys = Array.from({ length: 300_000 }, (_, i) => `c:${i}`);
    await fill(server.port, keys, (k) => ['RL.TOKENBUCKET', k, '10', '3600000']);
    const counted = await stat('memory', 'used_memory_counted_for_evict');
    await limitToEvict(150_000);
    await waitForEvictions(150_000);
    const kept = (await c.call('DBSIZE')) as number;
    expect(kept).toBeGreaterThanOrEqual(145_000);
    expect(kept).toBeLessThanOrEqual(155_000);
    expect(await stat('memory', 'used_memory_counted_for_evict')).toBeLessThanOrEqual(await stat('memory', 'maxmemory'));
    // Under the limit again: every call succeeds (each new key makes room by evicting one).
    for (let i = 0; i < 200; i++) expect(((await c.call('RL.TOKENBUCKET', `new:${i}`, '10', '3600000')) as number[])[0]).toBe(0);
    expect(await c.call('DBSIZE')).toBe(kept);
    // Raised back: nothing more is evicted, new keys are added.
    const evicted = await stat('stats', 'evicted_keys');
    expect(await c.call('CONFIG', 'SET', 'maxmemory', String(counted + 1024 * 1024))).toBe('OK');
    for (let i = 0; i < 200; i++) expect(((await c.call('GCRA', `more:${i}`, '10', '100', '60')) as number[])[0]).toBe(0);
    expect(await c.call('DBSIZE')).toBe(kept + 200);
    expect(await stat('stats', 'evicted_keys')).toBe(evicted);
  });
});

describe('maxmemory and the empty server (used_memory_startup)', () => {
  it('used_memory_startup is the empty server after a GC: maxmemory a little above it serves; below it is refused at CONFIG SET and at start', async () => {
    const memory = String(await c.call('INFO', 'memory'));
    const startup = Number(infoField(memory, 'used_memory_startup'));
    await c.call('DEBUG', 'GC');
    const heapAfterGc = Number(infoField(await c.call('INFO', 'memory'), 'used_memory_heap'));
    console.log(`[memory] used_memory_startup ${startup}, used_memory_heap after DEBUG GC ${heapAfterGc} (empty server, warm-up off)`);
    // Measured after a full GC: not the ~17 MB the process held before one (a sanity bound, generous).
    expect(startup).toBeGreaterThan(1024 * 1024);
    expect(startup).toBeLessThan(15 * 1024 * 1024);
    // Too small to hold the empty server: refused with the reason, the old value kept.
    expect(await c.call('CONFIG', 'SET', 'maxmemory', String(startup - 1))).toEqual({
      error: `ERR CONFIG SET failed (possibly related to argument 'maxmemory') - maxmemory ${startup - 1} is below the ${startup} bytes the server holds with no key (INFO used_memory_startup): every limiter call would be refused with OOM; set 0 (no limit) or more`,
    });
    expect(await c.call('CONFIG', 'GET', 'maxmemory')).toEqual(['maxmemory', '0']);
    // A little above the baseline (room for ~100 keys): limiter calls are answered, under every policy.
    for (const policy of ['noeviction', 'volatile-ttl']) {
      expect(await c.call('CONFIG', 'SET', 'maxmemory-policy', policy, 'maxmemory', String(startup + 100 * RECORD_BYTES + 16 * 1024))).toBe('OK');
      for (let i = 0; i < 20; i++) expect(((await c.call('CL.THROTTLE', `${policy}:${i}`, '5', '10', '60')) as number[])[0]).toBe(0);
    }
    expect(await stat('stats', 'evicted_keys')).toBe(0);
    // At start: a maxmemory below the baseline stops it with one clear line.
    const refused = runToExit(['--port', '0', '--dir', mkdtempSync(join(tmpdir(), 'cellgate-mem-')), '--maxmemory', '1mb', '--warmup', 'no']);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/^cellgate: maxmemory 1048576 is below the \d+ bytes the server holds with no key \(INFO used_memory_startup\): every limiter call would be refused with OOM; set 0 \(no limit\) or more\n$/);
  });

  it('--maxmemory 15mb: an empty server (warm-up on, as shipped) answers limiter calls, no -OOM', async () => {
    const s = await startServer({ args: ['--maxmemory', '15mb', '--warmup', 'yes', '--maxmemory-policy', 'noeviction'] });
    const k = await Checker.open(s.port);
    try {
      for (let i = 0; i < 100; i++) expect(((await k.call('CL.THROTTLE', `k:${i}`, '5', '10', '60')) as number[])[0]).toBe(0);
      const memory = String(await k.call('INFO', 'memory'));
      console.log(`[memory] warm-up on: used_memory_startup ${infoField(memory, 'used_memory_startup')}, used_memory ${infoField(memory, 'used_memory')}, maxmemory ${infoField(memory, 'maxmemory')}`);
      expect(Number(infoField(memory, 'used_memory'))).toBeLessThanOrEqual(15 * 1024 * 1024);
    } finally {
      k.close();
      await s.stop();
    }
  });
});

describe('maxmemory and client buffers', () => {
  it('300 unauthenticated clients sending junk, never reading, holding 45 MB of input evict no limiter key', async () => {
    const s = await startServer({ args: ['--requirepass', 'pw'] });
    const admin = await Checker.open(s.port);
    const flooders: net.Socket[] = [];
    try {
      expect(await admin.call('AUTH', 'pw')).toBe('OK');
      await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
      const keys = Array.from({ length: 200_000 }, (_, i) => `u:${i}`);
      await fillAuthed(s.port, keys);
      expect(await admin.call('DBSIZE')).toBe(200_000);
      // A limit a bit above what the process uses with these keys (as an operator would set it).
      await admin.call('DEBUG', 'GC');
      const used = Number(infoField(await admin.call('INFO', 'memory'), 'used_memory'));
      expect(await admin.call('CONFIG', 'SET', 'maxmemory', String(used + 8 * 1024 * 1024))).toBe('OK');
      // Each flooder sends junk lines (error replies it never reads), then the most an unauthenticated
      // client may leave pending: 9 of the 10 arguments of 16 KiB allowed before AUTH, and half of
      // the 10th. The server holds ~150 KB of input for each, 45 MB in all, while maxmemory leaves 8.
      const piece = Buffer.alloc(16 * 1024, 0x6a);
      const junk = Buffer.concat([
        Buffer.from(`${'J'.repeat(120)} ${'a'.repeat(120)}\r\n`.repeat(50)),
        Buffer.from('*10\r\n'),
        ...Array.from({ length: 9 }, () => Buffer.concat([Buffer.from('$16384\r\n'), piece, Buffer.from('\r\n')])),
        Buffer.from('$16384\r\n'), piece.subarray(0, 8192),
      ]);
      for (let i = 0; i < 300; i++) {
        const sock = net.connect({ port: s.port, host: '127.0.0.1' });
        sock.on('error', () => {});
        sock.pause();
        flooders.push(sock);
      }
      await Promise.all(flooders.map((sock) => new Promise<void>((resolve) => (sock.connecting ? sock.once('connect', () => resolve()) : resolve()))));
      for (const sock of flooders) sock.write(junk);
      let clientBytes = 0;
      const oom: number[] = [];
      for (let round = 0; round < 20; round++) {
        await delay(100);
        // Limiter calls throughout, on existing keys and new ones; a full GC now and then (it made the
        // old estimate count the client buffers).
        for (let i = 0; i < 50; i++) {
          const r = await admin.call('RL.TOKENBUCKET', i % 2 === 0 ? `u:${round * 50 + i}` : `n:${round * 50 + i}`, '10', '3600000');
          if (!Array.isArray(r)) oom.push(round);
        }
        if (round % 5 === 4) await admin.call('DEBUG', 'GC');
        clientBytes = Math.max(clientBytes, Number(infoField(await admin.call('INFO', 'memory'), 'mem_clients_normal')));
      }
      const memory = String(await admin.call('INFO', 'memory'));
      console.log(`[memory] 300 flooders: mem_clients_normal peak ${clientBytes}, used_memory_heap ${infoField(memory, 'used_memory_heap')}, ` +
        `counted ${infoField(memory, 'used_memory_counted_for_evict')}, maxmemory ${infoField(memory, 'maxmemory')}, evicted_keys ${infoField(await admin.call('INFO', 'stats'), 'evicted_keys')}`);
      expect(clientBytes).toBeGreaterThan(30 * 1024 * 1024); // the flood really is held by the server
      // The heap holds the flood beyond maxmemory; what is compared with it (used_memory) does not.
      expect(Number(infoField(memory, 'used_memory_heap'))).toBeGreaterThan(Number(infoField(memory, 'maxmemory')));
      expect(Number(infoField(memory, 'used_memory'))).toBeLessThanOrEqual(Number(infoField(memory, 'maxmemory')));
      expect(oom).toEqual([]);
      expect(infoField(await admin.call('INFO', 'stats'), 'evicted_keys')).toBe('0');
      expect(await admin.call('DBSIZE')).toBe(200_000 + 20 * 25);
    } finally {
      for (const sock of flooders) sock.destroy();
      admin.close();
      await s.stop();
    }
  });
});

/** fill() over a connection that authenticates first. */
async function fillAuthed(port: number, keys: string[]): Promise<void> {
  const conn = await RawConnection.open(port);
  try {
    await conn.write(mbulk('AUTH', 'pw'));
    await conn.waitFor(() => conn.length >= 5, 5000, 'AUTH');
    for (let i = 0; i < keys.length; i += 10_000) {
      const batch = keys.slice(i, i + 10_000);
      const start = conn.length;
      await conn.write(Buffer.concat(batch.map((k) => mbulk('RL.TOKENBUCKET', k, '10', '3600000'))));
      await conn.waitFor(() => parseReplies(conn.received.subarray(start)).replies.length >= batch.length, 20_000, 'fill replies');
    }
  } finally {
    conn.destroy();
  }
}
