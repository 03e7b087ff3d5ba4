/**
 * Invalid CL.THROTTLE input (docs/commands.md) never changes state. Where redis-cell would answer
 * "limited" to negative arguments, refund or corrupt a key with a negative quantity, or wrap its
 * arithmetic on huge values, cellgate answers a clear error naming the argument, and the key (TAT
 * and expiry) is exactly as before: a control key that never saw the bad calls answers the same.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { useServer } from '../helpers/server.js';
import { exchange } from '../helpers/raw.js';

const AT_MS = '1800000000000.250';

const env = useServer();

/** Sends one command; an error reply comes back as { error: text }. */
async function send(...args: string[]): Promise<unknown> {
  try {
    return await env.redis.call(args[0], ...args.slice(1));
  } catch (e) {
    return { error: (e as Error).message };
  }
}

// [the arguments after the key, the argument the error must name, the quoted value (or null)]
const LONG_FORM: [string[], string, string | null][] = [
  // negative values (redis-cell: "limited" replies, or a refund / a key without expiry for quantity)
  [['-1', '5', '10'], 'max_burst', '-1'],
  [['4', '-5', '10'], 'count_per_period', '-5'],
  [['4', '5', '-10'], 'period', '-10'],
  [['4', '5', '10', '-1'], 'quantity', '-1'],
  [['4', '5', '10', '-3'], 'quantity', '-3'],
  [['-9223372036854775808', '5', '10'], 'max_burst', '-9223372036854775808'],
  // zero rates
  [['4', '0', '10'], 'count_per_period', '0'],
  [['4', '5', '0'], 'period', '0'],
  [['4', '-0', '10'], 'count_per_period', '-0'],
  // not integers
  [['abc', '5', '10'], 'max_burst', 'abc'],
  [['1.5', '5', '10'], 'max_burst', '1.5'],
  [['', '5', '10'], 'max_burst', ''],
  [[' 4', '5', '10'], 'max_burst', ' 4'],
  [['4 ', '5', '10'], 'max_burst', '4 '],
  [['0x10', '5', '10'], 'max_burst', '0x10'],
  [['4', '1e3', '10'], 'count_per_period', '1e3'],
  [['4', '5.0', '10'], 'count_per_period', '5.0'],
  [['4', '5', '10s'], 'period', '10s'],
  [['4', '5', '10', 'one'], 'quantity', 'one'],
  [['4', '5', '10', '+'], 'quantity', '+'],
  [['4', '5', '10', '-'], 'quantity', '-'],
  [['4', 'foo', 'bar', 'baz'], 'count_per_period', 'foo'], // the first bad argument wins
  // beyond i64
  [['9223372036854775808', '5', '10'], 'max_burst', '9223372036854775808'],
  [['4', '9223372036854775808', '10'], 'count_per_period', '9223372036854775808'],
  [['4', '5', '9223372036854775808'], 'period', '9223372036854775808'],
  [['4', '5', '10', '9223372036854775808'], 'quantity', '9223372036854775808'],
  [['4', '5', '10', '-9223372036854775809'], 'quantity', '-9223372036854775809'],
  // i64, but redis-cell wraps (limit = max_burst + 1; period in ns) where cellgate refuses
  [['9223372036854775807', '1', '1'], 'max_burst', '9223372036854775807'],
  [['9007199254740991', '1000000000', '1'], 'max_burst', '9007199254740991'],
  [['4', '10000000000', '9223372037'], 'period', '9223372037'],
  // a rate above 10^9 per second: T truncates to 0 ns ("Zero rates are not supported" in redis-cell)
  [['4', '2000000000', '1'], 'count_per_period', '2000000000'],
  // huge burst × period: the tolerance exceeds 100 years
  [['100', '1', '31536000'], 'max_burst/period', null],
  [['9007199254740990', '1', '1'], 'max_burst/period', null],
  [['4', '1', '9223372036'], 'max_burst/period', null],
];

const SHORT_FORM: [string[], string, string | null][] = [
  [['0', '5'], 'capacity', '0'],
  [['-1', '5'], 'capacity', '-1'],
  [['x', '5'], 'capacity', 'x'],
  [['9007199254740992', '5'], 'capacity', '9007199254740992'],
  [['5', '0'], 'rate_per_second', '0'],
  [['5', '-2'], 'rate_per_second', '-2'],
  [['5', '2.5'], 'rate_per_second', '2.5'],
  [['5', '2000000000'], 'rate_per_second', '2000000000'],
];

describe('CL.THROTTLE: invalid input is refused and never changes state', () => {
  it('every bad form: an error naming the argument; the key\'s TAT and expiry are untouched', async () => {
    expect(await send('DEBUG', 'CLOCK', 'SET', AT_MS)).toBe('OK');
    expect(await send('FLUSHALL')).toBe('OK');
    // State: 3 of 5 tokens taken (T = 2 s) on the key and on a control key.
    expect(await send('CL.THROTTLE', 'k', '4', '5', '10', '3')).toEqual([0, 5, 2, -1, 6]);
    expect(await send('CL.THROTTLE', 'control', '4', '5', '10', '3')).toEqual([0, 5, 2, -1, 6]);

    const failures: string[] = [];
    for (const [args, name, quoted] of [...LONG_FORM, ...SHORT_FORM]) {
      for (const key of ['k', 'fresh']) {
        const reply = await send('CL.THROTTLE', key, ...args);
        const text = (reply as { error?: string }).error;
        const ok = typeof text === 'string' && text.startsWith(`ERR invalid ${name}`) &&
          (quoted === null || text.includes(`'${quoted}'`));
        if (!ok) failures.push(`${JSON.stringify(args)} on ${key}: ${JSON.stringify(reply)} (want an error naming ${name})`);
      }
      // Untouched: same PTTL, and no key created for a fresh name.
      const after = [await send('PTTL', 'k'), await send('EXISTS', 'fresh')];
      if (JSON.stringify(after) !== '[6000,0]') failures.push(`${JSON.stringify(args)}: PTTL/EXISTS became ${JSON.stringify(after)}`);
    }
    expect(failures).toEqual([]);

    // The key answers exactly as the control key that never saw a bad call, now and later.
    for (const advanceMs of ['0', '1999.999', '0.001', '3000', '7000']) {
      expect(await send('DEBUG', 'CLOCK', 'ADVANCE', advanceMs)).toBe('OK');
      const mine = [await send('CL.THROTTLE', 'k', '4', '5', '10', '0'), await send('PTTL', 'k')];
      const control = [await send('CL.THROTTLE', 'control', '4', '5', '10', '0'), await send('PTTL', 'control')];
      expect(mine, `after +${advanceMs} ms`).toEqual(control);
      const take = await send('CL.THROTTLE', 'k', '4', '5', '10', '1');
      expect(take).toEqual(await send('CL.THROTTLE', 'control', '4', '5', '10', '1'));
    }
  });

  it('error texts are plain ASCII and quote the argument byte for byte', async () => {
    const reply = await send('CL.THROTTLE', 'k', 'caf\u00e9', '1', '1');
    expect(reply).toEqual({ error: "ERR invalid max_burst 'café': not an integer" });
    const tolerance = (await send('CL.THROTTLE', 'k', '100', '1', '31536000')) as { error: string };
    expect(tolerance.error).toMatch(/^[\x20-\x7e]+$/);
  });

  it('valid but never allowed (quantity above the limit, even i64::MAX): limited, retry −1, key untouched', async () => {
    expect(await send('DEBUG', 'CLOCK', 'SET', AT_MS)).toBe('OK');
    expect(await send('FLUSHALL')).toBe('OK');
    expect(await send('CL.THROTTLE', 'k', '4', '5', '10', '3')).toEqual([0, 5, 2, -1, 6]);
    for (const quantity of ['6', '100', '9223372036854775807']) {
      expect(await send('CL.THROTTLE', 'k', '4', '5', '10', quantity)).toEqual([1, 5, 2, -1, 6]);
      expect(await send('PTTL', 'k')).toBe(6000);
    }
    expect(await send('CL.THROTTLE', 'fresh', '4', '5', '10', '9223372036854775807')).toEqual([1, 5, 5, -1, 0]);
    expect(await send('EXISTS', 'fresh')).toBe(0);
  });

  it('the widest accepted values still work exactly', async () => {
    // Integers past 2^53 need stringNumbers: ioredis's RESP2 number parsing rounds them (it returned
    // 9007199254740992 for the :9007199254740991 this server sends).
    const exact = new Redis({ port: env.server.port, host: '127.0.0.1', protocol: 2, stringNumbers: true });
    try {
      expect(await exact.call('DEBUG', 'CLOCK', 'SET', AT_MS)).toBe('OK');
      // limit 2^53 − 1 with T = 1 ns: τ ≈ 104 days. T is below 1 µs, so redis-cell's remaining divides
      // by whole_microseconds(T) = 0 and saturates at i64::MAX.
      expect(await exact.call('CL.THROTTLE', 'wide', '9007199254740990', '1000000000', '1'))
        .toEqual(['0', '9007199254740991', '9223372036854775807', '-1', '0']);
    } finally {
      exact.disconnect();
    }
    // period 9223372036 s with count 10^10: T = 922337203 ns.
    expect(await send('CL.THROTTLE', 'long', '0', '10000000000', '9223372036')).toEqual([0, 1, 0, -1, 1]);
    expect(await send('PTTL', 'long')).toBe(922);
  });
  it('the same limit repeated, changed, refused and repeated again (the parsed-limit memo) answers as parsed afresh', async () => {
    expect(await send('DEBUG', 'CLOCK', 'SET', AT_MS)).toBe('OK');
    expect(await send('FLUSHALL')).toBe('OK');
    expect(await send('CL.THROTTLE', 'm', '4', '5', '10')).toEqual([0, 5, 4, -1, 2]);
    expect(await send('CL.THROTTLE', 'm', '4', '5', '10')).toEqual([0, 5, 3, -1, 4]);
    // Same bytes after a longer key, then one more argument, then the short form with those numbers.
    expect(await send('CL.THROTTLE', 'longer-key', '4', '5', '10')).toEqual([0, 5, 4, -1, 2]);
    expect(await send('CL.THROTTLE', 'm', '4', '5', '10', '2')).toEqual([0, 5, 1, -1, 8]);
    expect(await send('CL.THROTTLE', 's', '4', '5')).toEqual([0, 4, 3, -1, 1]);
    expect(await send('CL.THROTTLE', 'm', '4', '5', '-10')).toEqual({ error: "ERR invalid period '-10': must be >= 1 second" });
    expect(await send('CL.THROTTLE', 'm', '4', '5', '10')).toEqual([0, 5, 0, -1, 10]);
    expect(await send('CL.THROTTLE', 'm', '4', '5', '10')).toEqual([1, 5, 0, 2, 10]);
    // Inline commands keep each argument in its own buffer (parsed every time): same answers, and
    // the memo of the multibulk calls around them is not disturbed.
    const expected = '*5\r\n:1\r\n:5\r\n:0\r\n:2\r\n:10\r\n*5\r\n:0\r\n:5\r\n:4\r\n:-1\r\n:2\r\n';
    const { text, conn } = await exchange(env.server.port, 'CL.THROTTLE m 4 5 10\r\nCL.THROTTLE i 4 5 10\r\n', expected);
    conn.destroy();
    expect(text).toBe(expected);
    expect(await send('CL.THROTTLE', 'i', '4', '5', '10')).toEqual([0, 5, 3, -1, 4]);
  });
});
