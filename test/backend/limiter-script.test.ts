/**
 * The backend limiter script on a real redis-server, call by call: the reply decoding, refusedForUs
 * (probed with the debug time: refused at its last µs, allowed one µs later), WRONGTYPE for values
 * that are not cellgate's (never a Lua error), the stored expiry, TYPE_SCRIPT, TIME when no debug
 * time is given, and the parameters refused up front.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { useRedis } from '../helpers/redis.js';
import {
  BACKEND_WIDE_ERROR, LIMITER_SCRIPT, TYPE_SCRIPT, batchScriptHeader, limiterScriptArgv, parseLimiterReply, splitBatchReply, unitScriptArgv, type ScriptLimit,
} from '../../src/backend/limiter-script.js';
import { mulberry32 } from '../helpers/random.js';
import { cellParams, type CellParams } from '../../src/limiters/cell-throttle.js';
import { gcraParams, type GcraParams } from '../../src/limiters/redis-gcra.js';
import { gcraMsParams, newGcraMsParams } from '../../src/limiters/gcra-ms.js';
import { KeyType } from '../helpers/key-types.js';
import { FakeKey, replyOf } from '../limiters/rl-harness.js';

const redisServer = useRedis();
const env = {} as { redis: Redis };
let sha = '';
let typeSha = '';

beforeAll(async () => {
  env.redis = new Redis({ port: redisServer.node.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
  await env.redis.connect();
  sha = (await env.redis.script('LOAD', LIMITER_SCRIPT)) as string;
  typeSha = (await env.redis.script('LOAD', TYPE_SCRIPT)) as string;
});

afterAll(() => env.redis?.disconnect());

/** A week ahead of the real clock: Redis's own expiry never removes what the script still holds. */
const T0 = (Date.now() + 7 * 86400_000) * 1000;

function rl(type: KeyType, limit: number, periodMs: number, cost: number, burst = limit): ScriptLimit {
  const gcra = newGcraMsParams();
  if (type === KeyType.Gcra) expect(gcraMsParams(limit, periodMs, burst, gcra)).toBeNull();
  return { kind: 'rl', type, limit, periodMs, burst, gcra, cost };
}
function cl(maxBurst: number, count: number, period: number, quantity: number): ScriptLimit {
  return { kind: 'cl.throttle', params: cellParams(maxBurst, count, period) as CellParams, quantity };
}
function gcra(maxBurst: number, tpp: number, period: number, tokens: number): ScriptLimit {
  return { kind: 'gcra', params: gcraParams(maxBurst, tpp, period, tokens) as GcraParams };
}

async function call(keys: string[], limits: ScriptLimit[], nowUs: number | null, all = false) {
  const argv = limiterScriptArgv(limits, all, nowUs);
  if (!Array.isArray(argv)) throw new Error(argv.error);
  return parseLimiterReply(await env.redis.evalsha(sha, keys.length, ...keys, ...argv), limits);
}

async function type(key: string, nowUs: number): Promise<string> {
  return (await env.redis.evalsha(typeSha, 1, key, String(nowUs))) as string;
}

/** Spends until refused; returns the refusal's time and outcome. */
async function refuse(key: string, l: ScriptLimit, at: number) {
  for (let i = 0; i < 1000; i++) {
    const o = await call([key], [l], at);
    if (o.limited) return { at, outcome: o.limits[0] };
    at += 7;
  }
  throw new Error('never refused');
}

/** refusedForUs is exact: the same call is refused at its last µs and allowed one µs later. */
async function expectExact(key: string, l: ScriptLimit, at: number, refusedForUs: number): Promise<void> {
  expect(refusedForUs).toBeGreaterThanOrEqual(0);
  // A refused call writes nothing, so both probes read the state the refusal saw.
  expect((await call([key], [l], at + refusedForUs)).limited).toBe(true);
  expect((await call([key], [l], at + refusedForUs + 1)).limited).toBe(false);
}

describe('limiter script, call by call', () => {
  it('CL.THROTTLE: reply as redis-cell, expiry stored with PXAT, refusedForUs exact to the µs (ns intervals)', async () => {
    // 3 per second: T = 333333333 ns, a nanosecond part that the µs answer must round the right way.
    const l = cl(1, 3, 1, 1);
    const first = await call(['c:1'], [l], T0);
    expect(first).toEqual({ limited: false, limits: [{ values: [0, 2, 1, -1, 1], refusedForUs: -1 }] });
    expect(await env.redis.call('PEXPIRETIME', 'c:1')).toBe(Math.floor(T0 / 1000) + 333);
    const { at, outcome } = await refuse('c:1', l, T0 + 1);
    expect(outcome.values.slice(0, 2)).toEqual([1, 2]);
    await expectExact('c:1', l, at, outcome.refusedForUs);
  });

  it('CL.THROTTLE: quantity above the limit is refused for good (-1); remaining saturated to i64::MAX decodes as the local value', async () => {
    const never = await call(['c:2'], [cl(1, 3, 1, 3)], T0);
    expect(never.limits[0]).toEqual({ values: [1, 2, 2, -1, 0], refusedForUs: -1 });
    // An interval below 1 µs (2·10^6 per second): redis-cell's remaining divides by 0 µs.
    const sat = await call(['c:3'], [cl(5, 2_000_000, 1, 1)], T0);
    expect(sat.limits[0].values).toEqual([0, 6, Number.MAX_VALUE, -1, 0]);
  });

  it('GCRA (Redis): refusedForUs exact on the millisecond-truncated clock', async () => {
    const l = gcra(0, 1, 0.25, 1);
    const { at, outcome } = await refuse('g:1', l, T0 + 123);
    expect(outcome.values[0]).toBe(1);
    await expectExact('g:1', l, at, outcome.refusedForUs);
  });

  it('RL.* : refusedForUs exact for each algorithm, from a sub-ms instant', async () => {
    const cases: [string, ScriptLimit][] = [
      ['tb', rl(KeyType.TokenBucket, 3, 1000, 1, 2)],
      ['lb', rl(KeyType.LeakyBucket, 3, 1000, 1, 2)],
      ['fw', rl(KeyType.FixedWindow, 2, 1000, 1)],
      ['sl', rl(KeyType.SlidingLog, 2, 1000, 1)],
      ['sw', rl(KeyType.SlidingWindow, 2, 1000, 1)],
      ['rg', rl(KeyType.Gcra, 3, 1000, 1, 2)],
    ];
    for (const [name, l] of cases) {
      const { at, outcome } = await refuse(`r:${name}`, l, T0 + 456);
      await expectExact(`r:${name}`, l, at, outcome.refusedForUs);
    }
  });

  it('refusedForUs is the true wait when the key was written with other limits: shorter than retry_after', async () => {
    // A fixed window written with period 1000 (window start 1000 ms past `base`, which is not one of
    // period 300's) and read with period 300 after a step back to 950 ms: retry_after counts to the
    // stored start + 300, but the count stops applying at the next 300 ms window start (1200).
    const base = Math.ceil(T0 / 3e6) * 3e6; // µs; its ms a multiple of both periods
    expect((await call(['fw:x'], [rl(KeyType.FixedWindow, 1, 1000, 1)], base + 1_200_000)).limited).toBe(false);
    const l = rl(KeyType.FixedWindow, 1, 300, 1);
    const o = await call(['fw:x'], [l], base + 950_000);
    expect(o.limited).toBe(true);
    expect(o.limits[0].values[3]).toBe(350);
    expect(o.limits[0].refusedForUs).toBe(250_000 - 1);
    await expectExact('fw:x', l, base + 950_000, o.limits[0].refusedForUs);
  });

  it('refusedForUs is bounded by the key\'s expiry: a writer with a faster refill set an earlier one', async () => {
    expect((await call(['tb:x'], [rl(KeyType.TokenBucket, 100, 1000, 5, 5)], T0)).limited).toBe(false);
    const slow = rl(KeyType.TokenBucket, 1, 1000, 5, 5);
    const r = await call(['tb:x'], [slow], T0 + 1);
    expect(r.limited).toBe(true);
    expect(r.limits[0].values[3]).toBe(5000);
    expect(r.limits[0].refusedForUs).toBe((Math.floor(T0 / 1000) + 50 + 1) * 1000 - (T0 + 1) - 1);
    await expectExact('tb:x', slow, T0 + 1, r.limits[0].refusedForUs);
  });

  it('RL.ALL: nothing is written unless every limit allows; each limit answers as if alone', async () => {
    const limits = [rl(KeyType.TokenBucket, 10, 1000, 2), rl(KeyType.FixedWindow, 1, 1000, 2)];
    const o = await call(['{a}1', '{a}2'], limits, T0, true);
    expect(o.limited).toBe(true);
    expect(o.limits[0]).toEqual({ values: [0, 10, 8, -1, 200, 0], refusedForUs: -1 });
    expect(o.limits[1]).toEqual({ values: [1, 1, 1, -1, 0, 0], refusedForUs: -1 });
    expect(await env.redis.exists('{a}1', '{a}2')).toBe(0);
    // The same two limits without all-or-nothing: the allowed one is spent.
    await call(['{a}1', '{a}2'], limits, T0, false);
    expect(await env.redis.exists('{a}1', '{a}2')).toBe(1);
  });

  it('WRONGTYPE for another algorithm\'s key and for values that are not cellgate\'s, never a Lua error', async () => {
    await call(['w:tb'], [rl(KeyType.TokenBucket, 5, 1000, 1)], T0);
    await env.redis.hset('w:hash', 'f', 'v');
    await env.redis.set('w:plain', 'hello');
    const forged = Buffer.alloc(34);
    forged[0] = 198;
    forged[1] = 2;
    forged.writeDoubleLE(NaN, 2);
    await env.redis.set('w:nan', forged);
    const short = Buffer.from([198, 2, 0, 0]);
    await env.redis.set('w:short', short);
    const log = Buffer.alloc(34 + 8); // a sliding log whose entries are not whole 16-byte pairs
    log[0] = 198;
    log[1] = 5;
    log.writeDoubleLE(Math.floor(T0 / 1000) + 1000, 2);
    await env.redis.set('w:log', log);
    await env.redis.lpush('w:list', 'x');
    const wrong = 'WRONGTYPE Operation against a key holding the wrong kind of value';
    for (const key of ['w:hash', 'w:plain', 'w:nan', 'w:short', 'w:log', 'w:list']) {
      for (const l of [cl(1, 1, 1, 1), gcra(1, 1, 1, 1), rl(KeyType.SlidingLog, 5, 1000, 1), rl(KeyType.Gcra, 5, 1000, 1)]) {
        await expect(call([key], [l], T0), `${key} ${l.kind}`).rejects.toThrow(wrong);
      }
    }
    await expect(call(['w:tb'], [rl(KeyType.FixedWindow, 5, 1000, 1)], T0)).rejects.toThrow(wrong);
    await expect(call(['w:tb'], [cl(1, 1, 1, 1)], T0)).rejects.toThrow(wrong);
    // In RL.ALL the first WRONGTYPE ends the call before anything is written.
    await expect(call(['w:new', 'w:hash'], [rl(KeyType.TokenBucket, 5, 1000, 1), rl(KeyType.TokenBucket, 5, 1000, 1)], T0, true)).rejects.toThrow(wrong);
    expect(await env.redis.exists('w:new')).toBe(0);
    // Another algorithm's key that has expired by the stored expiry is absent, not WRONGTYPE.
    const later = T0 + 10 * 1e6;
    expect((await call(['w:tb'], [rl(KeyType.FixedWindow, 5, 1000, 1)], later)).limited).toBe(false);
  });

  it('an empty string (not cellgate\'s) is WRONGTYPE and stays as it was, whether the call would write or not, alone or in a batch', async () => {
    const wrong = 'WRONGTYPE Operation against a key holding the wrong kind of value';
    await env.redis.set('e:empty', '', 'PX', 600_000);
    const writes = [cl(5, 1, 1, 1), gcra(5, 1, 1, 1), rl(KeyType.TokenBucket, 5, 1000, 1), rl(KeyType.FixedWindow, 5, 1000, 1), rl(KeyType.SlidingWindow, 5, 1000, 1), rl(KeyType.LeakyBucket, 5, 1000, 1), rl(KeyType.Gcra, 5, 1000, 1)];
    // A cost above the capacity and a COST 0 peek write nothing.
    const peeks = [cl(5, 1, 1, 100), rl(KeyType.TokenBucket, 5, 1000, 0), rl(KeyType.FixedWindow, 5, 1000, 6)];
    for (const l of [...writes, ...peeks]) {
      await expect(call(['e:empty'], [l], T0), `${JSON.stringify(l)}`).rejects.toThrow(wrong);
      const argv = limiterScriptArgv([l], false, T0) as Buffer[];
      // In a batch, between two calls on an absent key that are decided all the same.
      const packed = await env.redis.callBuffer('EVALSHA', sha, 0, batchScriptHeader(true), argv[0], 'e:absent1', argv[0], 'e:empty', argv[0], 'e:absent2');
      const replies = splitBatchReply(packed, 3)!;
      expect(Array.isArray(replies[0])).toBe(true);
      expect(replies[1]).toBe(wrong);
      expect(parseLimiterReply(replies[2], [l])).toEqual(parseLimiterReply(replies[0], [l]));
      await env.redis.del('e:absent1', 'e:absent2');
    }
    expect(await env.redis.get('e:empty')).toBe('');
    expect(await env.redis.pttl('e:empty')).toBeGreaterThan(0);
  });

  it('TYPE_SCRIPT: cellgate names, none when absent or expired by the stored expiry, Redis\'s TYPE otherwise', async () => {
    await call(['t:gcra'], [cl(1, 1, 1, 1)], T0);
    await call(['t:log'], [rl(KeyType.SlidingLog, 5, 1000, 1)], T0);
    await call(['t:sw'], [rl(KeyType.SlidingWindow, 5, 1000, 1)], T0);
    await env.redis.hset('t:hash', 'f', 'v');
    await env.redis.set('t:plain', 'x');
    expect(await type('t:gcra', T0)).toBe('gcra');
    expect(await type('t:log', T0)).toBe('slidinglog');
    expect(await type('t:sw', T0)).toBe('slidingwindow');
    expect(await type('t:hash', T0)).toBe('hash');
    expect(await type('t:plain', T0)).toBe('string');
    expect(await type('t:absent', T0)).toBe('none');
    // The sliding log's key lives until its entry slides out: 1000 ms.
    expect(await type('t:log', T0 + 1000_999)).toBe('slidinglog');
    expect(await type('t:log', T0 + 1_001_000)).toBe('none');
  });

  it('without a debug time the script reads TIME: the stored expiry follows Redis\'s clock', async () => {
    const before = Number((await env.redis.time())[0]) * 1000;
    const o = await call(['time:1'], [rl(KeyType.FixedWindow, 5, 60_000, 1)], null);
    expect(o.limited).toBe(false);
    const exp = (await env.redis.call('PEXPIRETIME', 'time:1')) as number;
    // A fixed window's key expires at the end of the minute window holding Redis's now.
    expect(exp % 60_000).toBe(0);
    expect(exp).toBeGreaterThan(before);
    expect(exp).toBeLessThanOrEqual(before + 61_000);
  });

  it('a stored TAT whose next value would pass 2^53 µs: the 2^53 error from the script, not a Lua error or a rounded answer', async () => {
    const value = Buffer.alloc(34);
    value[0] = 198;
    value[1] = 1;
    value.writeDoubleLE(2 ** 52, 2); // expiry (ms): far ahead
    value.writeDoubleLE(2 ** 53 - 10, 10); // TAT, µs
    await env.redis.set('wide:tat', value);
    await expect(call(['wide:tat'], [gcra(10, 1, 1, 1)], T0)).rejects.toThrow(BACKEND_WIDE_ERROR);
    expect(Buffer.compare((await env.redis.getBuffer('wide:tat'))!, value)).toBe(0);
    // CL.THROTTLE's µs + ns arithmetic has no such bound below 2^53: it answers (refused, TAT ahead).
    expect((await call(['wide:tat'], [cl(10, 1, 1, 1)], T0)).limited).toBe(true);
  });

  it('limiterScriptArgv refuses GCRA parameters that only the BigInt path computes exactly', () => {
    const wide = gcraParams(2n ** 60n, 1_000_000, 1, 1);
    expect(typeof wide === 'object' && wide.wide !== null).toBe(true);
    expect(limiterScriptArgv([{ kind: 'gcra', params: wide as GcraParams }], false, T0)).toEqual({ error: BACKEND_WIDE_ERROR });
    expect(Array.isArray(limiterScriptArgv([gcra(10, 1, 1, 1)], false, T0))).toBe(true);
  });

  it('a long sliding log (hundreds of entries, read entry by entry, written in place) decides as src/limiters/sliding-log.ts', async () => {
    // The in-process TS limiter (test/limiters/rl-harness.ts) is the reference; 2500 calls, mostly
    // a few ms apart, with jumps that slide most of the log out.
    const limit = 400;
    const periodMs = 3000;
    const ref = new FakeKey('slidinglog', { limit, periodMs, burst: limit });
    let seed = 12345;
    const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    let t = T0 + 321;
    const pipe = env.redis.pipeline();
    const expected: { reply: number[]; exp: number; nowMs: number }[] = [];
    for (let i = 0; i < 2500; i++) {
      const u = rand();
      t += u < 0.2 ? 0 : u < 0.98 ? Math.floor(rand() * 20_000) : 500_000 + Math.floor(rand() * 3_000_000);
      const nowMs = Math.floor(t / 1000);
      const cost = i % 97 === 0 ? 350 : Math.floor(rand() * 4);
      const r = replyOf(ref.decide(cost, nowMs));
      const reply = ref.call(cost, nowMs);
      expect(reply).toEqual(r);
      expected.push({ reply: Object.values(reply), exp: ref.lookup(nowMs) ? ref.expireAtMs : -2, nowMs });
      const argv = limiterScriptArgv([rl(KeyType.SlidingLog, limit, periodMs, cost)], false, t) as Buffer[];
      pipe.evalsha(sha, 1, 'long:log', ...argv);
      pipe.call('PEXPIRETIME', 'long:log');
      pipe.strlen('long:log');
      pipe.getrangeBuffer('long:log', 0, 33);
    }
    const results = (await pipe.exec())!;
    let inPlace = 0;
    let maxEntries = 0;
    for (let i = 0; i < expected.length; i++) {
      const [e1, reply] = results[4 * i];
      expect(e1).toBeNull();
      const { values } = parseLimiterReply(reply, [rl(KeyType.SlidingLog, limit, periodMs, 1)]).limits[0];
      expect(values, `call ${i}`).toEqual(expected[i].reply);
      const at = results[4 * i + 1][1] as number;
      expect(at < expected[i].nowMs ? -2 : at, `expiry after call ${i}`).toBe(expected[i].exp);
      const len = results[4 * i + 2][1] as number;
      const header = results[4 * i + 3][1] as Buffer;
      if (len === 0) continue;
      const dropped = header.readDoubleLE(10);
      const entries = header.readDoubleLE(18);
      // Stored entries: the dropped prefix plus the log; the prefix never outgrows the log.
      expect(dropped + entries).toBe((len - 34) / 16);
      expect(dropped).toBeLessThan(entries);
      if (dropped > 0) inPlace++;
      maxEntries = Math.max(maxEntries, entries);
    }
    expect(maxEntries).toBeGreaterThan(100);
    expect(inPlace).toBeGreaterThan(100);
  });

  it('a sliding log whose running totals reach 2^52 counts them from its oldest live entry again, as locally', async () => {
    const limit = 40;
    const periodMs = 10_000;
    const base = Math.floor(T0 / 1000);
    for (const entries of [5, 12]) { // read in one GET, and entry by entry
      const key = `restart:${entries}`;
      const offset = 2 ** 52 - entries - 3;
      // The same log in both layouts: the local ring (A head, B entries, C units, running totals)
      // and the backend value; one unit per entry, 1 ms apart.
      const ref = new FakeKey('slidinglog', { limit, periodMs, burst: limit });
      const ring = new Float64Array(2 * entries);
      const value = Buffer.alloc(34 + 16 * entries);
      for (let k = 0; k < entries; k++) {
        ring[2 * k] = base + k;
        ring[2 * k + 1] = offset + k + 1;
        value.writeDoubleLE(base + k, 34 + 16 * k);
        value.writeDoubleLE(offset + k + 1, 42 + 16 * k);
      }
      Object.assign(ref, { exists: true, a: 0, b: entries, c: entries, blob: ring, expireAtMs: base + entries - 1 + periodMs });
      value[0] = 198;
      value[1] = 5;
      value.writeDoubleLE(base + entries - 1 + periodMs, 2);
      value.writeDoubleLE(0, 10);
      value.writeDoubleLE(entries, 18);
      value.writeDoubleLE(entries, 26);
      await env.redis.set(key, value, 'PXAT', base + entries - 1 + periodMs);
      // The first spend passes 2^52; then more calls on the restarted totals, some sliding out.
      const steps: [number, number][] = [[entries + 5, 6], [entries + 5, 2], [entries + 9, 30], [entries + 9, 1], [periodMs + 2, 3], [periodMs + 20, 1], [2 * periodMs, 0]];
      for (const [dtMs, cost] of steps) {
        const nowMs = base + dtMs;
        const want = ref.call(cost, nowMs);
        const got = await call([key], [rl(KeyType.SlidingLog, limit, periodMs, cost)], nowMs * 1000 + 17);
        expect(got.limits[0].values, `${entries} entries, +${dtMs} ms cost ${cost}`).toEqual(Object.values(want));
        const at = (await env.redis.call('PEXPIRETIME', key)) as number;
        expect(at < nowMs ? -2 : at).toBe(ref.lookup(nowMs) ? ref.expireAtMs : -2);
      }
      // Restarted: the newest running total is small again.
      const stored = await env.redis.getBuffer(key);
      expect(stored!.readDoubleLE(stored!.length - 8)).toBeLessThan(1000);
    }
  });

  it('the commands a call costs Redis: TIME, one read (GETRANGE: never more than the value\'s header) and one SET per key; one ARGV element per call', async () => {
    // Counted through INFO commandstats (calls, never timings); the debug time is not given, so
    // each call reads TIME as the backend mode does.
    const commands = async (): Promise<Record<string, number>> => {
      const info = (await env.redis.info('commandstats')) as string;
      const out: Record<string, number> = {};
      for (const m of info.matchAll(/cmdstat_([a-z]+):calls=(\d+)/g)) out[m[1]] = Number(m[2]);
      return out;
    };
    const cases: [string, ScriptLimit[], string[]][] = [
      ['cost:cl', [cl(10, 10, 60, 1)], ['getrange', 'set']],
      ['cost:tb', [rl(KeyType.TokenBucket, 10, 60_000, 1)], ['getrange', 'set']],
      // A short sliding log is read whole in one command (no STRLEN, no GET after it).
      ['cost:log', [rl(KeyType.SlidingLog, 10, 60_000, 1)], ['getrange', 'set']],
    ];
    for (const [key, limits, reads] of cases) {
      await env.redis.del(key);
      const argv = limiterScriptArgv(limits, false, null) as Buffer[];
      expect(argv).toHaveLength(1);
      await env.redis.evalsha(sha, 1, key, ...argv); // creates the key
      await env.redis.config('RESETSTAT');
      for (let i = 0; i < 3; i++) await env.redis.evalsha(sha, 1, key, ...argv);
      const got = await commands();
      delete got.evalsha;
      delete got.info;
      expect(got, key).toEqual(Object.fromEntries([['time', 3], ...reads.map((r) => [r, 3])].sort()));
    }
  });

  it('parseLimiterReply: decodes the flat reply (5 or 6 values and refusedForUs per limit) and rejects other shapes', () => {
    const limits = [cl(1, 1, 1, 1), rl(KeyType.TokenBucket, 1, 1, 1)];
    expect(parseLimiterReply([1, 1, 2, 0, 1, 1, 999, 0, 1, 0, -1, 1, 0, -1], limits)).toEqual({
      limited: true,
      limits: [{ values: [1, 2, 0, 1, 1], refusedForUs: 999 }, { values: [0, 1, 0, -1, 1, 0], refusedForUs: -1 }],
    });
    expect(parseLimiterReply([0, 0, 6, '9223372036854775807', -1, 0, -1], [limits[0]]).limits[0].values[2]).toBe(Number.MAX_VALUE);
    expect(() => parseLimiterReply([0], limits)).toThrow(TypeError);
    expect(() => parseLimiterReply([0, 1, 2, 3, 1], limits)).toThrow(TypeError);
    // One element too many or too few for the limits' widths.
    expect(() => parseLimiterReply([1, 1, 2, 0, 1, 1, 999, 0, 1, 0, -1, 1, 0, -1, 0], limits)).toThrow(TypeError);
    expect(() => parseLimiterReply([1, 1, 2, 0, 1, 1, 999, 0, 1, 0, -1, 1, 0], limits)).toThrow(TypeError);
    expect(() => parseLimiterReply([0, [0, 6, 0, -1, 0, -1]], [limits[0]])).toThrow(TypeError);
    expect(() => parseLimiterReply('OK', limits)).toThrow(TypeError);
  });
});

describe('limiter script, a unit of calls (a transaction)', () => {
  /** One call of a unit: its keys (without the test's prefix), limits, all-or-nothing. */
  interface UnitCall {
    keys: string[];
    limits: ScriptLimit[];
    all: boolean;
  }

  function randomCall(next: () => number): UnitCall {
    const key = (): string => `k${Math.floor(next() * 3)}`;
    const pick = Math.floor(next() * 6);
    // Keys of each family are kept apart (c*, g* and r*), except r* keys of two RL.* types, which
    // answer WRONGTYPE to each other.
    if (pick === 0) return { keys: [`c${key()}`], limits: [cl(2, 3, 10, 1 + Math.floor(next() * 2))], all: false };
    if (pick === 1) return { keys: [`g${key()}`], limits: [gcra(2, 3, 10, 1)], all: false };
    const type = next() < 0.8 ? KeyType.FixedWindow : KeyType.TokenBucket;
    if (pick === 5) {
      return { keys: ['ra', 'rb'], limits: [rl(KeyType.FixedWindow, 3, 10_000, 1), rl(KeyType.FixedWindow, 2, 10_000, 1)], all: true };
    }
    const l = rl(type, 3, 10_000, 1);
    return { keys: [`r${key()}`], limits: [pick === 4 ? { ...l, refund: 1 } as ScriptLimit : l], all: false };
  }

  async function oneByOne(prefix: string, calls: UnitCall[], nowUs: number): Promise<unknown[]> {
    const out: unknown[] = [];
    for (const c of calls) {
      out.push(await call(c.keys.map((k) => prefix + k), c.limits, nowUs, c.all).catch((e: Error) => e.message));
    }
    return out;
  }

  async function asUnit(prefix: string, calls: UnitCall[], nowUs: number): Promise<unknown[]> {
    const elements = calls.map((c) => (limiterScriptArgv(c.limits, c.all, nowUs) as Buffer[])[0]);
    const keys = calls.flatMap((c) => c.keys.map((k) => prefix + k));
    const reply = (await env.redis.evalsha(sha, keys.length, ...keys, ...unitScriptArgv(elements, nowUs))) as unknown[];
    expect(reply).toHaveLength(calls.length);
    return reply.map((r, i) => (r instanceof Error ? r.message : parseLimiterReply(r, calls[i].limits)));
  }

  it('decides each call as the same calls one by one, in order, a call\'s WRONGTYPE in its place (seeded)', async () => {
    const next = mulberry32(20261202);
    let wrongTypes = 0;
    for (let round = 0; round < 30; round++) {
      const calls = Array.from({ length: 2 + Math.floor(next() * 6) }, () => randomCall(next));
      const at = T0 + round * 1_000_000;
      const single = await oneByOne(`unit:s${round}:`, calls, at);
      const unit = await asUnit(`unit:u${round}:`, calls, at);
      expect(unit, JSON.stringify(calls.map((c) => c.keys))).toEqual(single);
      wrongTypes += single.filter((r) => typeof r === 'string' && r.startsWith('WRONGTYPE ')).length;
    }
    // The seed's sequences do include WRONGTYPE answers in the middle of a unit.
    expect(wrongTypes).toBeGreaterThan(0);
  });

  it('without a debug clock the unit reads TIME once', async () => {
    const calls: UnitCall[] = [0, 1, 2].map((i) => ({ keys: [`t${i}`], limits: [rl(KeyType.FixedWindow, 3, 10_000, 1)], all: false }));
    await env.redis.config('RESETSTAT');
    const elements = calls.map((c) => (limiterScriptArgv(c.limits, false, null) as Buffer[])[0]);
    const reply = (await env.redis.evalsha(sha, 3, 'unit:t0', 'unit:t1', 'unit:t2', ...unitScriptArgv(elements, null))) as unknown[];
    expect(reply.map((r, i) => parseLimiterReply(r, calls[i].limits).limited)).toEqual([false, false, false]);
    const stats = String(await env.redis.info('commandstats'));
    expect(/cmdstat_time:calls=(\d+)/.exec(stats)?.[1]).toBe('1');
  });
});

describe('limiter script, a batch\'s calls on absent keys', () => {
  // A batch decides a key's first call as on an absent key (SET NX), that decision computed once per
  // distinct ARGV element: each call must still answer, write and expire as the same call alone.
  const limits: ScriptLimit[] = [
    cl(4, 10, 60, 1), cl(4, 10, 60, 2), cl(4, 10, 60, 9), cl(0, 3, 1, 1),
    gcra(4, 10, 60, 1), rl(KeyType.TokenBucket, 5, 60_000, 1), rl(KeyType.TokenBucket, 5, 60_000, 0),
    { ...rl(KeyType.TokenBucket, 5, 60_000, 1), refund: 2 } as ScriptLimit, rl(KeyType.FixedWindow, 3, 10_000, 2),
    rl(KeyType.SlidingWindow, 3, 10_000, 1), rl(KeyType.LeakyBucket, 3, 10_000, 1), rl(KeyType.Gcra, 3, 10_000, 1), rl(KeyType.SlidingLog, 3, 10_000, 1),
  ];
  /** Keys of other Redis types or not cellgate's, and one a call wrote before the batch. */
  async function preset(prefix: string, at: number): Promise<void> {
    const until = Math.floor(T0 / 1000) + 86400_000;
    await env.redis.set(`${prefix}foreign`, 'not a limiter value', 'PXAT', until);
    await env.redis.set(`${prefix}empty`, '', 'PXAT', until);
    await env.redis.hset(`${prefix}hash`, 'f', '1');
    await call([`${prefix}used`], [cl(4, 10, 60, 3)], at - 1_000_000);
  }
  const special = ['foreign', 'empty', 'hash', 'used'];

  it('each call answers, writes and expires as alone, whether its element or key came before in the batch (seeded)', async () => {
    const next = mulberry32(20261203);
    for (let round = 0; round < 20; round++) {
      const at = T0 + round * 100_000_000;
      // Mostly one element on fresh keys, as a sidecar's turn; some other limits, repeated and special keys.
      const calls = Array.from({ length: 10 + Math.floor(next() * 40) }, (_, i) => {
        const l = next() < 0.5 ? limits[0] : limits[Math.floor(next() * limits.length)];
        const r = next();
        const key = r < 0.6 ? `k${i}` : r < 0.8 ? `k${Math.floor(next() * i)}` : special[Math.floor(next() * special.length)];
        // A second clock in some batches: a call's element carries its own.
        return { key, l, now: round % 3 === 2 && next() < 0.3 ? at + 1234 : at };
      });
      const one = `abs:s${round}:`;
      const batched = `abs:b${round}:`;
      await preset(one, at);
      await preset(batched, at);
      const alone: unknown[] = [];
      for (const c of calls) alone.push(await call([one + c.key], [c.l], c.now).then((o) => o, (e: Error) => e.message));
      const elements: (Buffer | string)[] = [batchScriptHeader(true)];
      for (const c of calls) elements.push((limiterScriptArgv([c.l], false, c.now) as Buffer[])[0], batched + c.key);
      const replies = splitBatchReply(await env.redis.callBuffer('EVALSHA', sha, 0, ...elements), calls.length)!;
      expect(replies).not.toBeNull();
      const got = replies.map((r, i) => (typeof r === 'string' ? r : parseLimiterReply(r, [calls[i].l])));
      expect(got, JSON.stringify(calls.map((c) => c.key))).toEqual(alone);
      for (const k of new Set(calls.map((c) => c.key))) {
        expect(await env.redis.getBuffer(batched + k).catch(() => 'hash'), k).toEqual(await env.redis.getBuffer(one + k).catch(() => 'hash'));
        expect(await env.redis.pexpiretime(batched + k), k).toBe(await env.redis.pexpiretime(one + k));
      }
    }
  });

  it('a batch of one element on absent keys costs one SET per call and no read; a key already there costs its read', async () => {
    const argv = (limiterScriptArgv([cl(4, 10, 60, 1)], false, T0) as Buffer[])[0];
    await call(['cnt:there'], [cl(4, 10, 60, 1)], T0 - 1000);
    const elements: (Buffer | string)[] = [batchScriptHeader(true)];
    for (let i = 0; i < 20; i++) elements.push(argv, `cnt:${i}`);
    elements.push(argv, 'cnt:there', argv, 'cnt:0');
    await env.redis.config('RESETSTAT');
    const replies = splitBatchReply(await env.redis.callBuffer('EVALSHA', sha, 0, ...elements), 22)!;
    expect(replies.map((r) => (r as number[])[0])).toEqual(Array(22).fill(0));
    const stats = String(await env.redis.info('commandstats'));
    const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    // 20 absent keys: one SET NX each; cnt:there: SET NX (refused), its read, its SET; cnt:0 again:
    // its SET only (the batch wrote it: what it wrote is not read back).
    expect(calls('set')).toBe(20 + 2 + 1);
    expect(calls('getrange')).toBe(1);
    expect(calls('time')).toBe(0);
  });

  it('a key named again and again in one batch (a large tenant) is read once at most, and answers as the same calls alone', async () => {
    const limit = cl(1000, 1000, 60, 1);
    const argv = (limiterScriptArgv([limit], false, T0) as Buffer[])[0];
    await call(['tenant:old'], [limit], T0 - 1000);
    await call(['alone:tenant:old'], [limit], T0 - 1000);
    const keys = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? 'tenant:new' : 'tenant:old'));
    const alone: unknown[] = [];
    for (const k of keys) alone.push(await call([`alone:${k}`], [limit], T0));
    const elements: (Buffer | string)[] = [batchScriptHeader(true)];
    for (const k of keys) elements.push(argv, k);
    await env.redis.config('RESETSTAT');
    const replies = splitBatchReply(await env.redis.callBuffer('EVALSHA', sha, 0, ...elements), keys.length)!;
    const stats = String(await env.redis.info('commandstats'));
    const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    // tenant:new: one SET NX, then 19 SETs; tenant:old: a refused SET NX, one read, 20 SETs.
    expect(calls('getrange')).toBe(1);
    expect(calls('set')).toBe(1 + 19 + 1 + 20);
    expect(replies.map((r) => parseLimiterReply(r, [limit]))).toEqual(alone);
    // Each key's calls counted down one by one, in order.
    expect(replies.filter((_, i) => keys[i] === 'tenant:new').map((r) => parseLimiterReply(r, [limit]).limits[0].values[2]))
      .toEqual(Array.from({ length: 20 }, (_, i) => 1000 - i));
    expect(await env.redis.getBuffer('tenant:new')).toEqual(await env.redis.getBuffer('alone:tenant:new'));
    expect(await env.redis.pexpiretime('tenant:new')).toBe(await env.redis.pexpiretime('alone:tenant:new'));
  });

  it('a batch whose keys are there (a window within its window) stops trying SET NX after three misses: read first, same replies', async () => {
    const limit = rl(KeyType.FixedWindow, 100, 60_000, 1);
    const argv = (limiterScriptArgv([limit], false, T0) as Buffer[])[0];
    for (let i = 0; i < 20; i++) await call([`live:${i}`], [limit], T0 - 1000);
    const elements: (Buffer | string)[] = [batchScriptHeader(true)];
    for (let i = 0; i < 20; i++) elements.push(argv, `live:${i}`);
    for (let i = 0; i < 5; i++) elements.push(argv, `fresh:${i}`);
    await env.redis.config('RESETSTAT');
    const replies = splitBatchReply(await env.redis.callBuffer('EVALSHA', sha, 0, ...elements), 25)!;
    // Each live window counted its second hit, each fresh one its first.
    expect(replies.map((r) => parseLimiterReply(r, [limit]).limits[0].values[2])).toEqual([...Array(20).fill(98), ...Array(5).fill(99)]);
    const stats = String(await env.redis.info('commandstats'));
    const calls = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    // Three refused SET NX, then every key read first: 20 reads and SETs of the live ones, 5 reads and
    // SET NX of the fresh ones (an empty read is written with NX: an empty string stays WRONGTYPE).
    expect(calls('set')).toBe(3 + 20 + 5);
    expect(calls('getrange')).toBe(25);
  });
});
