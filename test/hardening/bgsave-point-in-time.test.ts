/**
 * BGSAVE writes the keyspace as it was when it started (docs/snapshot-format.md, "Consistency of a
 * background save"), over TCP: 100,000 keys, then, while the save runs, keys it has already written
 * are deleted and re-created (landing in slots it has not reached: freed slots are reused last-in,
 * first-out), keys it has not reached are deleted, new keys appear and FLUSHDB empties the keyspace.
 * A second server loads the file: no duplicate key, `check` accepts it, and the key count and the
 * sampled states and TTLs are those of the start (the clock frozen with DEBUG CLOCK SET).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { fillKeys, info, runToExit, startOn, T0_AHEAD_MS, tempDir } from '../persistence/helpers.js';
import { waitFor } from '../helpers/wait.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const N = 100_000;
/** Keys the traffic during the save touches: k:0.. (written early) and ..k:N-1 (reached last). */
const TOUCHED = 300;
const LIMIT = ['100', '1', '3600'];

/** CL.THROTTLE with quantity 0 (reads the state, changes nothing) and PTTL, per key. */
async function peek(r: Redis, keys: string[]): Promise<string[]> {
  const p = r.pipeline();
  for (const k of keys) {
    p.call('CL.THROTTLE', k, ...LIMIT, '0');
    p.pttl(k);
  }
  const out: string[] = [];
  const replies = (await p.exec())!;
  for (let i = 0; i < keys.length; i++) {
    const [e1, throttle] = replies[2 * i];
    const [e2, pttl] = replies[2 * i + 1];
    out.push(`${keys[i]} ${e1?.message ?? JSON.stringify(throttle)} pttl=${e2?.message ?? String(pttl)}`);
  }
  return out;
}

/**
 * What happens besides the DEL / re-create rounds while the save runs: nothing more, FLUSHDB (in
 * round FLUSH_ROUND), maxmemory eviction of random keys (from the first round on), or the clock
 * jumping past every key's expiry (the active expiry cycle and lookups remove them).
 */
type Extra = 'none' | 'flush' | 'evict' | 'expire';
const FLUSH_ROUND = 4;

/**
 * Fills a server with N keys, starts a BGSAVE and runs rounds of traffic while it runs; then loads the
 * file in a second server and compares it with the start.
 */
async function saveUnderTraffic(extra: Extra): Promise<void> {
  const dir = tempDir();
  dirs.push(dir);
  const a = await startOn(dir, ['--save', '']);
  const ra = new Redis(a.port);
  let expected: string[];
  let sample: string[];
  let extraDuringSave = extra === 'none';
  let roundsDuringSave = 0;
  try {
    await ra.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
    await fillKeys(a.port, N);
    // Distinct states: the touched keys and some others spend 1..40 more tokens.
    const random: string[] = [];
    for (let i = 0; i < 500; i++) random.push(`k:${TOUCHED + ((i * 7919) % (N - 2 * TOUCHED))}`);
    sample = [...Array.from({ length: TOUCHED }, (_, i) => `k:${i}`), ...Array.from({ length: TOUCHED }, (_, i) => `k:${N - 1 - i}`), ...random];
    const spend = ra.pipeline();
    sample.forEach((k, i) => spend.call('CL.THROTTLE', k, ...LIMIT, String(1 + (i % 40))));
    await spend.exec();
    expected = await peek(ra, sample);
    const spent = new Set(sample);
    let fillOnly = N >> 1;
    while (spent.has(`k:${fillOnly}`)) fillOnly++;
    const fillOnlyKey = `k:${fillOnly}`;
    expect(await ra.dbsize()).toBe(N);

    // The least maxmemory accepted (the empty server): with these keys, every write evicts.
    const leastMaxmemory = (await info(ra, 'memory')).used_memory_startup;
    expect(await ra.bgsave()).toBe('Background saving started');
    for (let j = 0; j < TOUCHED; j++) {
      const p = ra.pipeline().info('persistence');
      if (extra === 'flush' && j === FLUSH_ROUND) {
        // Everything goes; some keys come back (old names and new ones).
        p.flushdb();
        for (let i = 0; i < 100; i++) p.call('CL.THROTTLE', `k:${i}`, ...LIMIT, '3');
      }
      // Every write evicts (random keys, most of them not reached by the save yet).
      if (extra === 'evict' && j === 0) p.config('SET', 'maxmemory-policy', 'allkeys-random').config('SET', 'maxmemory', leastMaxmemory);
      // Two hours on: every key of the start has expired (they live about an hour).
      // A key only the fill wrote (it lives an hour) is then looked up: it has expired, whether or
      // not the active expiry cycle ran during the save (that depends on the machine's load).
      if (extra === 'expire' && j === 0) p.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS + 7_200_000)).exists(fillOnlyKey);
      // A key the save has written (the walk starts at k:0's slot), one it has not reached yet
      // (k:N-1-j is in one of the last slots), then the first again: it takes the slot just freed.
      p.del(`k:${j}`).del(`k:${N - 1 - j}`).call('CL.THROTTLE', `k:${j}`, ...LIMIT, '50');
      p.call('CL.THROTTLE', `new:${j}`, ...LIMIT, '1');
      p.info('stats');
      const replies = (await p.exec())!;
      // INFO is answered in the same turn as the commands after it: they ran during the save.
      if (!String(replies[0][1]).includes('rdb_bgsave_in_progress:1')) break;
      roundsDuringSave++;
      if (extra === 'flush' && j === FLUSH_ROUND) extraDuringSave = true;
      const stats = String(replies[replies.length - 1][1]);
      if (extra === 'evict' && !stats.includes('\r\nevicted_keys:0\r\n')) extraDuringSave = true;
      if (extra === 'expire' && !stats.includes('\r\nexpired_keys:0\r\n')) extraDuringSave = true;
    }
    if (extra === 'evict') await ra.config('SET', 'maxmemory', '0');
    await waitFor(async () => (await info(ra)).rdb_bgsave_in_progress === '0', 'the background save to end', undefined, 5);
    expect((await info(ra)).rdb_last_bgsave_status).toBe('ok');
  } finally {
    ra.disconnect();
    await a.stop();
  }
  // The traffic ran while the save did (it is fast: ~20 ms for 100k keys on a quiet machine).
  expect(roundsDuringSave).toBeGreaterThanOrEqual(5);
  expect(extraDuringSave).toBe(true);

  // The start refuses a file with a key twice ('duplicate key'); this one loads.
  const b = await startOn(dir, ['--save', '']);
  const rb = new Redis(b.port);
  try {
    await rb.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
    expect(await rb.dbsize()).toBe(N);
    expect(await peek(rb, sample)).toEqual(expected);
    expect(await rb.exists('new:0', 'new:3', 'new:4')).toBe(0);
  } finally {
    rb.disconnect();
    await b.stop();
  }
  const c = runToExit(['check', join(dir, 'cellgate.snap')]);
  expect(c.status).toBe(0);
  expect(c.stdout).toContain(`\nkeys: ${N}\n`);
}

describe('BGSAVE point in time', () => {
  it('keys written by the save, then deleted and re-created in slots it has not reached, are in the file once, as at the start', async () => {
    await saveUnderTraffic('none');
  });

  it('FLUSHDB and new keys during the save leave the file as the keyspace was at the start', async () => {
    await saveUnderTraffic('flush');
  });

  it('maxmemory eviction during the save leaves the file as the keyspace was at the start', async () => {
    await saveUnderTraffic('evict');
  });

  it('keys expiring during the save are written as of the start', async () => {
    await saveUnderTraffic('expire');
  });
});
