/**
 * The RL.* family over TCP with ioredis, in RESP2 and RESP3: reply shapes, argument errors (and that
 * they leave keys untouched), WRONGTYPE, TYPE names, TTL = reset_after_ms, COST 0 never creating a
 * key, and RL.ALL's all-or-nothing spending. Time is driven by DEBUG CLOCK.
 */
import net from 'node:net';
import { beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import fc from 'fast-check';
import { useServerResp2And3 } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';
import { FakeKey, refundCaseArb, type Algo } from '../limiters/rl-harness.js';

const env = useServerResp2And3();
const T0 = 1_800_000_000_000; // a multiple of every period used below


async function at(ms: number): Promise<void> {
  await env.r2.call('DEBUG', 'CLOCK', 'SET', String(ms));
}

/** Sends raw RESP and returns the bytes of the reply (read until `done` says it is complete). */
async function raw(payload: string, done: (s: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(env.server.port, '127.0.0.1');
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      if (done(buf)) {
        sock.destroy();
        resolve(buf);
      }
    });
    sock.on('error', reject);
    sock.write(payload);
  });
}

/** The first n fields of a reply. */
function head(reply: unknown, n: number): unknown[] {
  return (reply as unknown[]).slice(0, n);
}

const FIELDS = ['limited', 'limit', 'remaining', 'retry_after_ms', 'reset_after_ms', 'delay_ms'];
/** RESP3 replies as ioredis returns them through `call` (a map flattened into key, value, ...). */
function asMap(values: number[]): unknown[] {
  return FIELDS.flatMap((f, i) => [f, values[i]]);
}

beforeEach(async () => {
  await env.r2.flushall();
  await at(T0);
});

describe('RL.* replies', () => {
  it('RESP2: an array of 6 integers for every algorithm', async () => {
    expect(await env.r2.call('RL.TOKENBUCKET', 'tb', '10', '1000', 'BURST', '20')).toEqual([0, 20, 19, -1, 100, 0]);
    expect(await env.r2.call('RL.LEAKYBUCKET', 'lb', '5', '1000', 'BURST', '6')).toEqual([0, 6, 5, -1, 200, 0]);
    expect(await env.r2.call('RL.FIXEDWINDOW', 'fw', '3', '1000')).toEqual([0, 3, 2, -1, 1000, 0]);
    expect(await env.r2.call('RL.SLIDINGLOG', 'sl', '3', '1000', 'COST', '2')).toEqual([0, 3, 1, -1, 1000, 0]);
    expect(await env.r2.call('RL.SLIDINGWINDOW', 'sw', '3', '1000')).toEqual([0, 3, 2, -1, 2000, 0]);
    expect(await env.r2.call('RL.GCRA', 'g', '10', '1000', 'BURST', '2')).toEqual([0, 2, 1, -1, 100, 0]);
  });

  it('RESP3: a map with the six keys in order', async () => {
    expect(await env.r3.call('RL.TOKENBUCKET', 'tb', '10', '1000')).toEqual(asMap([0, 10, 9, -1, 100, 0]));
    expect(await env.r3.call('RL.GCRA', 'g', '1', '1000')).toEqual(asMap([0, 1, 0, -1, 1000, 0]));
    expect(await env.r3.call('RL.GCRA', 'g', '1', '1000')).toEqual(asMap([1, 1, 0, 1000, 1000, 0]));
    const bytes = await raw('HELLO 3\r\nRL.FIXEDWINDOW fw 2 1000\r\n', (s) => s.endsWith(':0\r\n') && s.includes('delay_ms'));
    expect(bytes.slice(bytes.indexOf('%6'))).toBe(
      '%6\r\n$7\r\nlimited\r\n:0\r\n$5\r\nlimit\r\n:2\r\n$9\r\nremaining\r\n:1\r\n$14\r\nretry_after_ms\r\n:-1\r\n' +
      '$14\r\nreset_after_ms\r\n:1000\r\n$8\r\ndelay_ms\r\n:0\r\n');
  });

  it('the leaky bucket shapes a burst like nginx limit_req rate=5r/s burst=5', async () => {
    const replies = [];
    for (let i = 0; i < 7; i++) replies.push(await env.r2.call('RL.LEAKYBUCKET', 'lb', '5', '1000', 'BURST', '6'));
    expect(replies.map((x) => (x as number[])[5])).toEqual([0, 200, 400, 600, 800, 1000, 0]);
    expect(replies[6]).toEqual([1, 6, 0, 200, 1200, 0]);
    expect(await env.r2.pttl('lb')).toBe(1200);
  });

  it('TTL is reset_after_ms, and the key is gone once it is fresh again', async () => {
    const cases: [string, string[]][] = [
      ['RL.TOKENBUCKET', ['3', '1000']], ['RL.LEAKYBUCKET', ['3', '1000']], ['RL.FIXEDWINDOW', ['3', '1000']],
      ['RL.SLIDINGLOG', ['3', '1000']], ['RL.SLIDINGWINDOW', ['3', '1000']], ['RL.GCRA', ['3', '1000']],
    ];
    await at(T0 + 250);
    for (const [cmd, args] of cases) {
      const reply = (await env.r2.call(cmd, `k:${cmd}`, ...args, 'COST', '2')) as number[];
      expect(reply[0]).toBe(0);
      expect(await env.r2.pttl(`k:${cmd}`)).toBe(reply[4]);
    }
    await at(T0 + 250 + 1750 + 1); // past the longest: the sliding window's end of the next window
    for (const [cmd] of cases) expect(await env.r2.exists(`k:${cmd}`)).toBe(0);
  });

  it('a sliding window key written in window k lives to the end of window k+1', async () => {
    await at(T0 + 400);
    expect(await env.r2.call('RL.SLIDINGWINDOW', 'sw', '2', '1000', 'COST', '2')).toEqual([0, 2, 0, -1, 1600, 0]);
    await at(T0 + 1500); // half of the previous window still counts: 2·0.5 = 1
    expect(await env.r2.call('RL.SLIDINGWINDOW', 'sw', '2', '1000', 'COST', '0')).toEqual([0, 2, 1, -1, 500, 0]);
    expect(await env.r2.pttl('sw')).toBe(500);
    await at(T0 + 2001);
    expect(await env.r2.exists('sw')).toBe(0);
  });

  it('COST 0 peeks: allowed, current state, never creates or changes a key', async () => {
    for (const cmd of ['RL.TOKENBUCKET', 'RL.LEAKYBUCKET', 'RL.FIXEDWINDOW', 'RL.SLIDINGLOG', 'RL.SLIDINGWINDOW', 'RL.GCRA']) {
      expect(await env.r2.call(cmd, 'peek', '4', '1000', 'COST', '0')).toEqual([0, 4, 4, -1, 0, 0]);
      expect(await env.r2.exists('peek')).toBe(0);
    }
    await env.r2.call('RL.TOKENBUCKET', 'tb', '4', '1000', 'COST', '3');
    await at(T0 + 100);
    const ttl = await env.r2.pttl('tb');
    expect(await env.r2.call('RL.TOKENBUCKET', 'tb', '4', '1000', 'COST', '0')).toEqual([0, 4, 1, -1, 650, 0]);
    expect(await env.r2.pttl('tb')).toBe(ttl);
  });

  it('COST above the capacity is limited with retry_after_ms -1 and spends nothing', async () => {
    expect(await env.r2.call('RL.TOKENBUCKET', 'tb', '4', '1000', 'BURST', '2', 'COST', '3')).toEqual([1, 2, 2, -1, 0, 0]);
    expect(await env.r2.call('RL.FIXEDWINDOW', 'fw', '4', '1000', 'COST', '5')).toEqual([1, 4, 4, -1, 0, 0]);
    expect(await env.r2.call('RL.GCRA', 'g', '4', '1000', 'COST', '5')).toEqual([1, 4, 4, -1, 0, 0]);
    expect(await env.r2.dbsize()).toBe(0);
  });

  it('a refused call spends nothing', async () => {
    await env.r2.call('RL.SLIDINGLOG', 'sl', '3', '1000', 'COST', '2');
    expect(await env.r2.call('RL.SLIDINGLOG', 'sl', '3', '1000', 'COST', '2')).toEqual([1, 3, 1, 1000, 1000, 0]);
    expect(await env.r2.call('RL.SLIDINGLOG', 'sl', '3', '1000')).toEqual([0, 3, 0, -1, 1000, 0]);
  });
});

describe('RL.* errors', () => {
  it('names the argument and leaves the key untouched', async () => {
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000');
    const before = await env.r2.pttl('k');
    const cases: [string[], string][] = [
      [['RL.TOKENBUCKET', 'k', 'ten', '1000'], "ERR invalid limit 'ten': not an integer"],
      [['RL.TOKENBUCKET', 'k', '0', '1000'], "ERR invalid limit '0': must be >= 1"],
      [['RL.TOKENBUCKET', 'k', '10', '-5'], "ERR invalid period_ms '-5': must be >= 1"],
      [['RL.TOKENBUCKET', 'k', '10', '1.5'], "ERR invalid period_ms '1.5': not an integer"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'BURST', '0'], "ERR invalid BURST '0': must be >= 1"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '-1'], "ERR invalid COST '-1': must be >= 0"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'COST'], 'ERR syntax error'],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'FOO', '1'], 'ERR syntax error'],
      [['RL.TOKENBUCKET', 'k', '10', '1000000000000', 'BURST', '100000'], "ERR invalid BURST '100000': BURST x period_ms must be <= 4503599627370496 (BURST defaults to limit)"],
      [['RL.LEAKYBUCKET', 'k', '100000', '1000000000000', 'COST', '1'], "ERR invalid limit '100000': BURST x period_ms must be <= 4503599627370496 (BURST defaults to limit)"],
      [['RL.SLIDINGWINDOW', 'k', '100000', '1000000000000'], 'ERR invalid limit/period_ms: limit x period_ms must be <= 4503599627370496'],
      [['RL.TOKENBUCKET', 'k', '10', '1000000000001'], "ERR invalid period_ms '1000000000001': must be <= 1000000000000"],
      [['RL.FIXEDWINDOW', 'k', '10', '1000', 'BURST', '5'], 'ERR syntax error'],
      [['RL.SLIDINGLOG', 'k', '10', '1000', 'BURST', '5'], 'ERR syntax error'],
      [['RL.SLIDINGWINDOW', 'k', '10', '1000', 'BURST', '5'], 'ERR syntax error'],
      [['RL.SLIDINGLOG', 'k', '1000001', '1000'], "ERR invalid limit '1000001': must be <= 1000000"],
      [['RL.GCRA', 'k', '2000000', '1'], 'ERR invalid limit: more than 10^9 per second (the emission interval would be 0 ns)'],
      [['RL.TOKENBUCKET', 'k', '10'], "ERR wrong number of arguments for 'rl.tokenbucket' command"],
    ];
    for (const [argv, message] of cases) expect(await errorOf(env.r2.call(argv[0], ...argv.slice(1)))).toBe(message);
    expect(await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '0')).toEqual([0, 10, 9, -1, 100, 0]);
    expect(await env.r2.pttl('k')).toBe(before);
  });

  it('WRONGTYPE across algorithms; RL.GCRA shares gcra keys with CL.THROTTLE and GCRA', async () => {
    const wrongtype = 'WRONGTYPE Operation against a key holding the wrong kind of value';
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000');
    for (const cmd of ['RL.LEAKYBUCKET', 'RL.FIXEDWINDOW', 'RL.SLIDINGLOG', 'RL.SLIDINGWINDOW', 'RL.GCRA']) {
      expect(await errorOf(env.r2.call(cmd, 'k', '10', '1000'))).toBe(wrongtype);
    }
    expect(await errorOf(env.r2.call('CL.THROTTLE', 'k', '10', '10', '60'))).toBe(wrongtype);
    expect(await errorOf(env.r2.call('GCRA', 'k', '10', '10', '60'))).toBe(wrongtype);
    // CL.THROTTLE 1 burst, 1 per second; RL.GCRA with the same limit reads and spends the same TAT.
    expect(await env.r2.call('CL.THROTTLE', 'g', '1', '1', '1')).toEqual([0, 2, 1, -1, 1]);
    expect(await env.r2.call('RL.GCRA', 'g', '1', '1000', 'BURST', '2')).toEqual([0, 2, 0, -1, 2000, 0]);
    expect(await env.r2.call('CL.THROTTLE', 'g', '1', '1', '1')).toEqual([1, 2, 0, 1, 2]);
    expect(await env.r2.call('GCRA', 'g', '1', '1', '1')).toEqual([1, 2, 0, 1, 2]);
    expect(await env.r2.type('g')).toBe('gcra');
    expect(await errorOf(env.r2.call('RL.TOKENBUCKET', 'g', '1', '1000'))).toBe(wrongtype);
  });

  it('TYPE names the algorithm; INFO limiter counts keys per type; SCAN TYPE filters', async () => {
    await env.r2.call('CONFIG', 'RESETSTAT');
    const names: [string, string][] = [
      ['RL.TOKENBUCKET', 'tokenbucket'], ['RL.LEAKYBUCKET', 'leakybucket'], ['RL.FIXEDWINDOW', 'fixedwindow'],
      ['RL.SLIDINGLOG', 'slidinglog'], ['RL.SLIDINGWINDOW', 'slidingwindow'], ['RL.GCRA', 'gcra'],
    ];
    for (const [cmd, name] of names) {
      await env.r2.call(cmd, `t:${name}`, '5', '1000');
      await env.r2.call(cmd, `u:${name}`, '5', '1000');
      expect(await env.r2.type(`t:${name}`)).toBe(name);
    }
    const info = (await env.r2.info('limiter')) as string;
    for (const [cmd, name] of names) {
      expect(info).toContain(`keys_${name}:2\r\n`);
      expect(info).toContain(`limiter_${cmd.toLowerCase()}:allowed=2,limited=0\r\n`);
    }
    const [, keys] = (await env.r2.call('SCAN', '0', 'TYPE', 'slidinglog', 'COUNT', '100')) as [string, string[]];
    expect(keys.sort()).toEqual(['t:slidinglog', 'u:slidinglog']);
  });

  it('COMMAND INFO and COMMAND DOCS describe the family', async () => {
    const info = (await env.r2.call('COMMAND', 'INFO', 'rl.tokenbucket', 'rl.all')) as unknown[][];
    expect(info[0].slice(0, 6)).toEqual(['rl.tokenbucket', -4, ['write', 'denyoom', 'fast'], 1, 1, 1]);
    expect(info[1].slice(0, 2)).toEqual(['rl.all', -6]);
    const docs = (await env.r2.call('COMMAND', 'DOCS', 'rl.fixedwindow')) as unknown[];
    expect(JSON.stringify(docs)).toContain('period_ms');
    expect(JSON.stringify(docs)).not.toContain('BURST');
  });
});

describe('RL.* REFUND', () => {
  it('gives units back on every algorithm; the reply is the state after it; TTL follows it', async () => {
    const cases: [string, string[]][] = [
      ['RL.TOKENBUCKET', ['4', '1000']], ['RL.LEAKYBUCKET', ['4', '1000']], ['RL.FIXEDWINDOW', ['4', '1000']],
      ['RL.SLIDINGLOG', ['4', '1000']], ['RL.SLIDINGWINDOW', ['4', '1000']], ['RL.GCRA', ['4', '1000']],
    ];
    for (const [cmd, args] of cases) {
      const key = `k:${cmd}`;
      await env.r2.call(cmd, key, ...args, 'COST', '4');
      expect(head(await env.r2.call(cmd, key, ...args), 1)).toEqual([1]);
      const reply = (await env.r2.call(cmd, key, ...args, 'REFUND', '1')) as number[];
      expect([cmd, reply[0], reply[2], reply[3]]).toEqual([cmd, 0, 1, -1]);
      expect(await env.r2.pttl(key)).toBe(reply[4]);
      expect(head(await env.r2.call(cmd, key, ...args), 3)).toEqual([0, 4, 0]);
      // More than was spent: as fresh, and the key is gone.
      expect(await env.r2.call(cmd, key, ...args, 'refund', '100')).toEqual([0, 4, 4, -1, 0, 0]);
      expect(await env.r2.exists(key)).toBe(0);
    }
  });

  it('on an absent key: the fresh state, and no key is created; RESP3 map', async () => {
    expect(await env.r2.call('RL.TOKENBUCKET', 'none', '10', '1000', 'REFUND', '3')).toEqual([0, 10, 10, -1, 0, 0]);
    expect(await env.r3.call('RL.SLIDINGLOG', 'none', '10', '1000', 'REFUND', '3')).toEqual(asMap([0, 10, 10, -1, 0, 0]));
    expect(await env.r2.exists('none')).toBe(0);
  });

  it('shares the TAT of CL.THROTTLE keys (RL.GCRA REFUND moves it back)', async () => {
    // CL.THROTTLE g 1 1 1: burst 2, 1 per second.
    await env.r2.call('CL.THROTTLE', 'g', '1', '1', '1', '2');
    expect(head(await env.r2.call('CL.THROTTLE', 'g', '1', '1', '1'), 1)).toEqual([1]);
    expect(await env.r2.call('RL.GCRA', 'g', '1', '1000', 'BURST', '2', 'REFUND', '1')).toEqual([0, 2, 1, -1, 1000, 0]);
    expect(head(await env.r2.call('CL.THROTTLE', 'g', '1', '1', '1'), 3)).toEqual([0, 2, 0]);
  });

  it('errors name REFUND; COST and REFUND exclude each other; not in RL.ALL; the key is untouched', async () => {
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '5');
    const before = await env.r2.pttl('k');
    const cases: [string[], string][] = [
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '0'], "ERR invalid REFUND '0': must be >= 1"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', 'x'], "ERR invalid REFUND 'x': not an integer"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '9007199254740992'], "ERR invalid REFUND '9007199254740992': must be <= 9007199254740991"],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND'], 'ERR syntax error'],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '1', 'REFUND', '1'], 'ERR syntax error'],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '1', 'REFUND', '1'], 'ERR syntax error'],
      [['RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '1', 'COST', '1'], 'ERR syntax error'],
      [['RL.ALL', '1', 'k', 'TOKENBUCKET', '10', '1000', 'REFUND', '1'], 'ERR syntax error'],
    ];
    for (const [argv, message] of cases) expect(await errorOf(env.r2.call(argv[0], ...argv.slice(1)))).toBe(message);
    expect(await env.r2.pttl('k')).toBe(before);
    expect(await errorOf(env.r2.call('RL.FIXEDWINDOW', 'k', '10', '1000', 'REFUND', '1'))).toBe('WRONGTYPE Operation against a key holding the wrong kind of value');
  });

  it('is not a decision: INFO limiter counts the spends only', async () => {
    await env.r2.call('CONFIG', 'RESETSTAT');
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '2');
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '1');
    expect(await env.r2.info('limiter')).toContain('limiter_rl.tokenbucket:allowed=1,limited=0\r\n');
  });

  it('is a write for ACL key patterns, as the other RL.* calls', async () => {
    await env.r2.call('ACL', 'SETUSER', 'ro', 'on', '>pw', '%R~*', '+@all');
    await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '5');
    const u = new Redis({ port: env.server.port, host: '127.0.0.1', username: 'ro', password: 'pw', lazyConnect: true });
    await u.connect();
    try {
      expect(await errorOf(u.call('RL.TOKENBUCKET', 'k', '10', '1000', 'REFUND', '1'))).toMatch(/^NOPERM/);
    } finally {
      u.disconnect();
      await env.r2.call('ACL', 'DELUSER', 'ro');
    }
    expect(head(await env.r2.call('RL.TOKENBUCKET', 'k', '10', '1000', 'COST', '0'), 3)).toEqual([0, 10, 5]);
  });
});

describe('RL.ALL', () => {
  const perSecondAndHour = ['u:s', 'SLIDINGLOG', '3', '1000', 'u:h', 'TOKENBUCKET', '5', '3600000'];

  it('spends on every limit when all allow; RESP2 [limited, [6], [6]]', async () => {
    expect(await env.r2.call('RL.ALL', '2', ...perSecondAndHour)).toEqual([0, [0, 3, 2, -1, 1000, 0], [0, 5, 4, -1, 720000, 0]]);
    expect(await env.r2.type('u:s')).toBe('slidinglog');
    expect(await env.r2.type('u:h')).toBe('tokenbucket');
  });

  it('RESP3: [limited, map, map]', async () => {
    expect(await env.r3.call('RL.ALL', '2', ...perSecondAndHour, 'COST', '2')).toEqual([0, asMap([0, 3, 1, -1, 1000, 0]), asMap([0, 5, 3, -1, 1440000, 0])]);
  });

  it('spends nothing anywhere when one limit refuses; each reply as if asked alone', async () => {
    for (let i = 0; i < 3; i++) expect(((await env.r2.call('RL.ALL', '2', ...perSecondAndHour)) as number[])[0]).toBe(0);
    const hourBefore = await env.r2.pttl('u:h');
    // The per-second log is full: refused; the hour bucket would allow (2 of 5 left) but is not spent.
    expect(await env.r2.call('RL.ALL', '2', ...perSecondAndHour)).toEqual([1, [1, 3, 0, 1000, 1000, 0], [0, 5, 1, -1, 2880000, 0]]);
    expect(await env.r2.call('RL.TOKENBUCKET', 'u:h', '5', '3600000', 'COST', '0')).toEqual([0, 5, 2, -1, 2160000, 0]);
    expect(await env.r2.pttl('u:h')).toBe(hourBefore);
    // A second later the log has room; the hour bucket (2 left) now refuses COST 3, and the log is not spent.
    await at(T0 + 1000);
    expect(await env.r2.call('RL.ALL', '2', ...perSecondAndHour, 'COST', '3')).toEqual([1, [0, 3, 0, -1, 1000, 0], [1, 5, 2, 720000 - 1000, 2160000 - 1000, 0]]);
    expect(await env.r2.call('RL.SLIDINGLOG', 'u:s', '3', '1000', 'COST', '0')).toEqual([0, 3, 3, -1, 0, 0]);
    // A new key that would be created by an allowing limit is not created when another refuses.
    expect(((await env.r2.call('RL.ALL', '2', 'fresh', 'FIXEDWINDOW', '9', '1000', 'u:h', 'TOKENBUCKET', '5', '3600000', 'COST', '3')) as unknown[])[0]).toBe(1);
    expect(await env.r2.exists('fresh')).toBe(0);
  });

  it('COST 0 peeks at every limit and creates nothing', async () => {
    expect(await env.r2.call('RL.ALL', '2', ...perSecondAndHour, 'COST', '0')).toEqual([0, [0, 3, 3, -1, 0, 0], [0, 5, 5, -1, 0, 0]]);
    expect(await env.r2.dbsize()).toBe(0);
  });

  it('errors name the limit and leave every key untouched', async () => {
    await env.r2.call('RL.FIXEDWINDOW', 'fw', '5', '1000');
    await env.r2.call('RL.TOKENBUCKET', 'tb', '5', '1000');
    const cases: [string[], string][] = [
      [['0', 'a', 'TOKENBUCKET', '1', '1'], "ERR invalid numlimits '0': must be >= 1"],
      [['x', 'a', 'TOKENBUCKET', '1', '1'], "ERR invalid numlimits 'x': not an integer"],
      [['2', 'a', 'TOKENBUCKET', '1', '1'], "ERR wrong number of arguments for 'rl.all' command: limit 2 of 2 needs key ALGO limit period_ms"],
      [['1', 'a', 'CELL', '1', '1'], "ERR invalid ALGO 'CELL' in limit 1: expected TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGLOG, SLIDINGWINDOW or GCRA"],
      [['2', 'tb', 'TOKENBUCKET', '5', '1000', 'b', 'FIXEDWINDOW', '0', '1000'], "ERR invalid limit '0' in limit 2: must be >= 1"],
      [['2', 'tb', 'TOKENBUCKET', '5', '1000', 'b', 'FIXEDWINDOW', '5', '1000', 'BURST', '3'], 'ERR syntax error'],
      [['2', 'tb', 'TOKENBUCKET', '5', '1000', 'tb', 'TOKENBUCKET', '5', '1000'], "ERR duplicate key 'tb' in limit 2: each limit needs its own key"],
      [['1', 'tb', 'TOKENBUCKET', '5', '1000', 'COST', '-1'], "ERR invalid COST '-1': must be >= 0"],
      [['1', 'tb', 'TOKENBUCKET', '5', '1000', 'COST', '1', 'x'], 'ERR syntax error'],
      [['2', 'tb', 'TOKENBUCKET', '5', '1000', 'fw', 'SLIDINGLOG', '5', '1000'], 'WRONGTYPE Operation against a key holding the wrong kind of value'],
    ];
    for (const [args, message] of cases) expect(await errorOf(env.r2.call('RL.ALL', ...args))).toBe(message);
    expect(await env.r2.call('RL.TOKENBUCKET', 'tb', '5', '1000', 'COST', '0')).toEqual([0, 5, 4, -1, 200, 0]);
    expect(await env.r2.call('RL.FIXEDWINDOW', 'fw', '5', '1000', 'COST', '0')).toEqual([0, 5, 4, -1, 1000, 0]);
    expect(await env.r2.dbsize()).toBe(2);
  });
});

describe('RL.* over TCP equals the pure limiters', () => {
  const algos: [Algo, string, boolean][] = [
    ['tokenbucket', 'RL.TOKENBUCKET', true], ['leakybucket', 'RL.LEAKYBUCKET', true], ['fixedwindow', 'RL.FIXEDWINDOW', false],
    ['slidinglog', 'RL.SLIDINGLOG', false], ['slidingwindow', 'RL.SLIDINGWINDOW', false], ['gcra', 'RL.GCRA', true],
  ];
  for (const [algo, cmd, withBurst] of algos) {
    it(`${cmd}: replies and PTTL over random timelines with refunds, pipelined`, async () => {
      await fc.assert(fc.asyncProperty(refundCaseArb(withBurst), async ({ p, startMs, steps }) => {
        const pure = new FakeKey(algo, p);
        const args = [String(p.limit), String(p.periodMs), ...(withBurst ? ['BURST', String(p.burst)] : [])];
        const pipe = env.r2.pipeline().flushall();
        const want: unknown[] = [];
        let t = startMs;
        for (const step of steps) {
          t += step.gapMs;
          const units = Math.max(1, step.cost);
          pipe.call('DEBUG', 'CLOCK', 'SET', String(t)).call(cmd, 'k', ...args, ...(step.refund ? ['REFUND', String(units)] : ['COST', String(step.cost)])).pttl('k');
          const reply = step.refund ? pure.refund(units, t) : pure.call(step.cost, t);
          want.push(['OK', [reply.limited, reply.limit, reply.remaining, reply.retryAfterMs, reply.resetAfterMs, reply.delayMs], pure.pttl(t)]);
        }
        const results = (await pipe.exec())!.slice(1).map(([err, value]) => err?.message ?? value);
        const got = [];
        for (let i = 0; i < results.length; i += 3) got.push(results.slice(i, i + 3));
        expect(got).toEqual(want);
      }), { numRuns: 25 });
    });
  }
});
