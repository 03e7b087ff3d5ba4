/**
 * RL.BLOCK over TCP with ioredis, RESP2 and RESP3, time driven by DEBUG CLOCK: every limiter command
 * (the six RL.* algorithms, RL.ALL, CL.THROTTLE, GCRA; decisions, COST 0 peeks, refunds) answers a
 * blocked key refused, with the limit its own parameters give, nothing remaining and both waits the
 * block's time left, and changes nothing; the key is fresh at the block's end; DEL lifts it; TYPE,
 * TTL, PTTL, EXISTS, SCAN TYPE and INFO see it; it replaces a key of any type; it works in MULTI/EXEC
 * and touches WATCH; hostile arguments get clear errors and the process lives on.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { useServerResp2And3 } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';

const env = useServerResp2And3();
const T0 = 1_800_000_000_000;

async function at(ms: number): Promise<void> {
  await env.r2.call('DEBUG', 'CLOCK', 'SET', String(ms));
}

const FIELDS = ['limited', 'limit', 'remaining', 'retry_after_ms', 'reset_after_ms', 'delay_ms'];
/** RESP3 replies as ioredis returns them through `call` (a map flattened into key, value, ...). */
function asMap(values: number[]): unknown[] {
  return FIELDS.flatMap((f, i) => [f, values[i]]);
}

/** Each RL.* algorithm, its parameters, and the limit its replies report for them (BURST for the buckets and RL.GCRA). */
const ALGOS: [string, string[], number][] = [
  ['RL.TOKENBUCKET', ['5', '1000', 'BURST', '8'], 8],
  ['RL.LEAKYBUCKET', ['5', '1000', 'BURST', '8'], 8],
  ['RL.FIXEDWINDOW', ['5', '1000'], 5],
  ['RL.SLIDINGLOG', ['5', '1000'], 5],
  ['RL.SLIDINGWINDOW', ['5', '1000'], 5],
  ['RL.GCRA', ['5', '1000', 'BURST', '8'], 8],
];

describe('RL.BLOCK', () => {
  it('every RL.* algorithm: refused while blocked (RESP2 and RESP3), COST 0 and REFUND too, nothing changed; fresh at the end', async () => {
    for (const [cmd, params, limit] of ALGOS) {
      const key = `blk:${cmd}`;
      await at(T0);
      await env.r2.call(cmd, key, ...params, 'COST', '2');
      expect(await env.r2.call('RL.BLOCK', key, '2500')).toBe('OK');
      expect(await env.r2.type(key)).toBe('block');
      expect(await env.r2.pttl(key)).toBe(2500);
      expect(await env.r2.ttl(key)).toBe(3);
      await at(T0 + 1000);
      expect(await env.r2.call(cmd, key, ...params), cmd).toEqual([1, limit, 0, 1500, 1500, 0]);
      expect(await env.r3.call(cmd, key, ...params), cmd).toEqual(asMap([1, limit, 0, 1500, 1500, 0]));
      expect(await env.r2.call(cmd, key, ...params, 'COST', '0'), cmd).toEqual([1, limit, 0, 1500, 1500, 0]);
      expect(await env.r2.call(cmd, key, ...params, 'REFUND', '3'), cmd).toEqual([1, limit, 0, 1500, 1500, 0]);
      // Nothing changed: still a block, same expiry.
      expect(await env.r2.type(key)).toBe('block');
      expect(await env.r2.pttl(key)).toBe(1500);
      // Its last millisecond: still refused, 1 ms to wait.
      await at(T0 + 2499);
      expect(await env.r2.call(cmd, key, ...params), cmd).toEqual([1, limit, 0, 1, 1, 0]);
      // At its end the key is fresh: the spend before the block is gone too.
      await at(T0 + 2500);
      const fresh = (await env.r2.call(cmd, key, ...params)) as number[];
      expect(fresh[0], cmd).toBe(0);
      expect(fresh[2], cmd).toBe(limit - 1);
      expect(await env.r2.type(key)).toBe(cmd.slice(3).toLowerCase());
    }
  });

  it('CL.THROTTLE and GCRA: refused with the seconds rounded up, their own limit; nothing changed', async () => {
    await at(T0);
    await env.r2.call('RL.BLOCK', 'blk:cell', '2500');
    await at(T0 + 1);
    // 2499 ms left: 3 seconds (a client waiting 2 would find it still blocked).
    expect(await env.r2.call('CL.THROTTLE', 'blk:cell', '5', '10', '60')).toEqual([1, 6, 0, 3, 3]);
    expect(await env.r2.call('CL.THROTTLE', 'blk:cell', '5', '10', '60', '0')).toEqual([1, 6, 0, 3, 3]);
    expect(await env.r2.call('GCRA', 'blk:cell', '9', '10', '60', 'TOKENS', '2')).toEqual([1, 10, 0, 3, 3]);
    expect(await env.r3.call('GCRA', 'blk:cell', '9', '10', '60')).toEqual([1, 10, 0, 3, 3]);
    // A limit beyond 2^53 is reported exactly on a blocked key too (stringNumbers: no rounding by the client).
    const exact = new Redis({ port: env.server.port, host: '127.0.0.1', stringNumbers: true });
    expect(await exact.call('GCRA', 'blk:cell', '9007199254740993', '1000000000000', '1')).toEqual(['1', '9007199254740994', '0', '3', '3']);
    exact.disconnect();
    await at(T0 + 1500);
    expect(await env.r2.call('CL.THROTTLE', 'blk:cell', '5', '10', '60')).toEqual([1, 6, 0, 1, 1]);
    expect(await env.r2.pttl('blk:cell')).toBe(1000);
    await at(T0 + 2500);
    expect(await env.r2.call('CL.THROTTLE', 'blk:cell', '5', '10', '60')).toEqual([0, 6, 5, -1, 6]);
    expect(await env.r2.type('blk:cell')).toBe('gcra');
    // GCRA's overflow error stays an error on a blocked key, as on an absent one.
    await env.r2.call('RL.BLOCK', 'blk:cell', '1000');
    expect(await errorOf(env.r2.call('GCRA', 'blk:cell', '9223372036854775806', '1', '1000'))).toMatch(/^ERR GCRA limiting uses microsecond accuracy/);
    expect(await errorOf(env.r2.call('GCRA', 'blk:absent', '9223372036854775806', '1', '1000'))).toMatch(/^ERR GCRA limiting uses microsecond accuracy/);
  });

  it('RL.ALL: a blocked member refuses the whole call, the others answer their own decision, nothing is spent', async () => {
    await at(T0);
    await env.r2.call('RL.BLOCK', 'blk:all:b', '700');
    const args = ['RL.ALL', '3', 'blk:all:a', 'FIXEDWINDOW', '3', '1000', 'blk:all:b', 'SLIDINGLOG', '4', '1000', 'blk:all:c', 'TOKENBUCKET', '2', '1000', 'BURST', '5'];
    await at(T0 + 200);
    expect(await env.r2.call(...(args as [string, ...string[]]))).toEqual([1, [0, 3, 2, -1, 800, 0], [1, 4, 0, 500, 500, 0], [0, 5, 4, -1, 500, 0]]);
    const r3Reply = (await env.r3.call(...(args as [string, ...string[]]), 'COST', '2')) as unknown[];
    expect(r3Reply[0]).toBe(1);
    expect(r3Reply[2]).toEqual(asMap([1, 4, 0, 500, 500, 0]));
    expect(await env.r2.exists('blk:all:a', 'blk:all:c')).toBe(0);
    await at(T0 + 700);
    expect(await env.r2.call(...(args as [string, ...string[]]))).toEqual([0, [0, 3, 2, -1, 300, 0], [0, 4, 3, -1, 1000, 0], [0, 5, 4, -1, 500, 0]]);
  });

  it('DEL lifts a block; EXISTS, SCAN TYPE and INFO keys_block see it; a second BLOCK replaces the first', async () => {
    await at(T0);
    await env.r2.call('RL.BLOCK', 'blk:del', '60000');
    expect(await env.r2.exists('blk:del')).toBe(1);
    const [, found] = (await env.r2.call('SCAN', '0', 'TYPE', 'block', 'COUNT', '1000')) as [string, string[]];
    expect(found).toContain('blk:del');
    expect(await env.r2.info('limiter')).toMatch(/keys_block:[1-9]/);
    expect(await env.r2.call('RL.BLOCK', 'blk:del', '10')).toBe('OK');
    expect(await env.r2.pttl('blk:del')).toBe(10);
    expect(await env.r2.del('blk:del')).toBe(1);
    expect(await env.r2.call('RL.FIXEDWINDOW', 'blk:del', '5', '1000')).toEqual([0, 5, 4, -1, 1000, 0]);
  });

  it('replaces a key of any type with the block (its state is gone after the block)', async () => {
    await at(T0);
    expect(await env.r2.call('RL.SLIDINGLOG', 'blk:over', '3', '100000', 'COST', '3')).toEqual([0, 3, 0, -1, 100000, 0]);
    expect(await env.r2.call('RL.BLOCK', 'blk:over', '5')).toBe('OK');
    expect(await env.r2.type('blk:over')).toBe('block');
    expect(await env.r2.call('RL.SLIDINGLOG', 'blk:over', '3', '100000')).toEqual([1, 3, 0, 5, 5, 0]);
    await at(T0 + 5);
    expect(await env.r2.call('RL.SLIDINGLOG', 'blk:over', '3', '100000')).toEqual([0, 3, 2, -1, 100000, 0]);
    expect(await env.r2.call('RL.BLOCK', 'blk:new', '5')).toBe('OK');
  });

  it('in MULTI/EXEC, in order with the calls around it; a WATCHed key it blocks aborts the EXEC', async () => {
    await at(T0);
    const tx = await env.r2.multi().call('RL.FIXEDWINDOW', 'blk:tx', '5', '1000').call('RL.BLOCK', 'blk:tx', '300').call('RL.FIXEDWINDOW', 'blk:tx', '5', '1000').type('blk:tx').exec();
    expect(tx).toEqual([[null, [0, 5, 4, -1, 1000, 0]], [null, 'OK'], [null, [1, 5, 0, 300, 300, 0]], [null, 'block']]);
    const watcher = new Redis({ port: env.server.port, host: '127.0.0.1', lazyConnect: true });
    await watcher.connect();
    try {
      await watcher.watch('blk:watched');
      await env.r2.call('RL.BLOCK', 'blk:watched', '100');
      expect(await watcher.multi().call('RL.FIXEDWINDOW', 'blk:watched', '5', '1000').exec()).toBeNull();
    } finally {
      watcher.disconnect();
    }
  });

  it('hostile arguments: clear errors, the key untouched, the process alive', async () => {
    await at(T0);
    await env.r2.call('RL.FIXEDWINDOW', 'blk:hostile', '5', '1000');
    const bad: [string, RegExp][] = [
      ['0', /^ERR invalid ms '0': must be >= 1$/],
      ['-5', /^ERR invalid ms '-5': must be >= 1$/],
      ['1.5', /^ERR invalid ms '1.5': not an integer$/],
      ['1e3', /^ERR invalid ms '1e3': not an integer$/],
      ['', /^ERR invalid ms '': not an integer$/],
      ['abc', /^ERR invalid ms 'abc': not an integer$/],
      ['1000000000001', /^ERR invalid ms '1000000000001': must be <= 1000000000000$/],
      ['99999999999999999999999', /^ERR invalid ms '99999999999999999999999': not an integer$/],
      ['x'.repeat(100_000), /^ERR invalid ms 'x+': not an integer$/],
    ];
    for (const [ms, error] of bad) expect(await errorOf(env.r2.call('RL.BLOCK', 'blk:hostile', ms))).toMatch(error);
    expect(await errorOf(env.r2.call('RL.BLOCK', 'blk:hostile'))).toBe("ERR wrong number of arguments for 'rl.block' command");
    expect(await errorOf(env.r2.call('RL.BLOCK', 'blk:hostile', '10', '20'))).toBe("ERR wrong number of arguments for 'rl.block' command");
    expect(await env.r2.type('blk:hostile')).toBe('fixedwindow');
    // The longest block is accepted (about 31.7 years), and a 1 MiB key is a key like any other.
    expect(await env.r2.call('RL.BLOCK', 'blk:long', '1000000000000')).toBe('OK');
    expect(await env.r2.pttl('blk:long')).toBe(1_000_000_000_000);
    const bigKey = 'k'.repeat(1 << 20);
    expect(await env.r2.call('RL.BLOCK', bigKey, '1000')).toBe('OK');
    expect(await env.r2.call('RL.GCRA', bigKey, '5', '1000')).toEqual([1, 5, 0, 1000, 1000, 0]);
    expect(await env.r2.del(bigKey)).toBe(1);
    expect(await env.r2.ping()).toBe('PONG');
  });

  it('its key spec is OW update: an ACL user with write-only access to a key may block it, not spend it', async () => {
    const info = (await env.r2.call('COMMAND', 'INFO', 'rl.block')) as unknown[][];
    expect(info[0].slice(0, 3)).toEqual(['rl.block', 3, ['write', 'denyoom', 'fast']]);
    expect(info[0][6]).toEqual(['@write', '@fast', '@limiter']);
    expect((info[0][8] as unknown[][])[0].slice(0, 2)).toEqual(['flags', ['OW', 'update']]);
    await env.r2.call('ACL', 'SETUSER', 'blocker', 'on', 'nopass', '+@limiter', '%W~blk:acl:*');
    try {
      expect(await env.r2.call('ACL', 'DRYRUN', 'blocker', 'RL.BLOCK', 'blk:acl:1', '100')).toBe('OK');
      expect(await env.r2.call('ACL', 'DRYRUN', 'blocker', 'RL.FIXEDWINDOW', 'blk:acl:1', '5', '1000')).toMatch(/^No permissions to access the 'blk:acl:1' key/);
      expect(await env.r2.call('ACL', 'DRYRUN', 'blocker', 'RL.BLOCK', 'other', '100')).toMatch(/^No permissions to access the 'other' key/);
    } finally {
      await env.r2.call('ACL', 'DELUSER', 'blocker');
    }
  });
});
