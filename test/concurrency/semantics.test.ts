/**
 * RL.ACQUIRE / RL.RELEASE / RL.RENEW on the debug clock, with ioredis (RESP2 and RESP3) and
 * redis-cli: grants up to the limit, the reply's fields, expiry at the last lease's end, renewals,
 * DEL, the largest limit, argument errors that change nothing, WRONGTYPE, MULTI, ACL, INFO.
 */
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { useServerResp2And3 } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';

const env = useServerResp2And3();
const T0 = 1_800_000_000_000;

/** A RESP3 map as ioredis gives it (a Map, an object or a flat array) as [name, value] pairs in order. */
function pairs(m: unknown): [unknown, unknown][] {
  if (m instanceof Map) return [...m.entries()];
  if (Array.isArray(m)) return m.flatMap((v, i) => (i % 2 === 0 ? [[v, m[i + 1]] as [unknown, unknown]] : []));
  return Object.entries(m as object);
}

async function at(ms: number): Promise<void> {
  await env.r2.call('DEBUG', 'CLOCK', 'SET', String(T0 + ms));
}

describe('concurrency leases', () => {
  it('grants up to limit, then limited until the earliest lease ends; the key expires at the last end', async () => {
    const r = env.r2;
    await at(0);
    const a = (await r.call('RL.ACQUIRE', 'c:1', '2', '1000')) as unknown[];
    expect(a.slice(0, 6)).toEqual([0, 2, 1, -1, 1000, 0]);
    expect(a[6]).toMatch(/^[0-9a-f]{16}$/);
    await at(200);
    expect(await r.call('RL.ACQUIRE', 'c:1', '2', '1000', 'ID', 'job-2')).toEqual([0, 2, 0, -1, 1000, 0, 'job-2']);
    expect(await r.type('c:1')).toBe('concurrency');
    expect(await r.pttl('c:1')).toBe(1000);
    await at(300);
    // Full: the earliest lease ends at 1000, the last at 1200; nothing changes, no id.
    expect(await r.call('RL.ACQUIRE', 'c:1', '2', '1000')).toEqual([1, 2, 0, 700, 900, 0, null]);
    // Its slot is free at the exact instant it ends.
    await at(999);
    expect(((await r.call('RL.ACQUIRE', 'c:1', '2', '1000')) as unknown[])[0]).toBe(1);
    await at(1000);
    expect(((await r.call('RL.ACQUIRE', 'c:1', '2', '50', 'ID', 'late')) as unknown[]).slice(0, 6)).toEqual([0, 2, 0, -1, 200, 0]);
    // Every lease ended: the key is gone.
    await at(1201);
    expect(await r.exists('c:1')).toBe(0);
  });

  it('re-acquiring a live id renews it without a second slot; RENEW and RELEASE answer 1 for a live lease, 0 after', async () => {
    const r = env.r2;
    await at(10_000);
    expect(await r.call('RL.ACQUIRE', 'c:2', '3', '1000', 'ID', 'x')).toEqual([0, 3, 2, -1, 1000, 0, 'x']);
    await at(10_500);
    expect(await r.call('RL.ACQUIRE', 'c:2', '3', '1000', 'ID', 'x')).toEqual([0, 3, 2, -1, 1000, 0, 'x']);
    expect(await r.call('RL.RENEW', 'c:2', 'x', '5000')).toBe(1);
    expect(await r.pttl('c:2')).toBe(5000);
    expect(await r.call('RL.RENEW', 'c:2', 'nobody', '5000')).toBe(0);
    expect(await r.call('RL.RELEASE', 'c:2', 'nobody')).toBe(0);
    await at(15_500);
    // Ended at 15 500: renewing it is too late, the caller holds no slot.
    expect(await r.call('RL.RENEW', 'c:2', 'x', '5000')).toBe(0);
    expect(await r.call('RL.RELEASE', 'c:2', 'x')).toBe(0);
  });

  it('releasing the last lease deletes the key; DEL frees every slot', async () => {
    const r = env.r2;
    await at(20_000);
    await r.call('RL.ACQUIRE', 'c:3', '2', '60000', 'ID', 'a');
    await r.call('RL.ACQUIRE', 'c:3', '2', '60000', 'ID', 'b');
    expect(await r.call('RL.RELEASE', 'c:3', 'a')).toBe(1);
    expect(await r.call('RL.RELEASE', 'c:3', 'a')).toBe(0);
    expect(await r.exists('c:3')).toBe(1);
    expect(await r.call('RL.RELEASE', 'c:3', 'b')).toBe(1);
    expect(await r.exists('c:3')).toBe(0);
    await r.call('RL.ACQUIRE', 'c:4', '1', '60000', 'ID', 'a');
    expect(((await r.call('RL.ACQUIRE', 'c:4', '1', '60000')) as unknown[])[0]).toBe(1);
    expect(await r.del('c:4')).toBe(1);
    expect(((await r.call('RL.ACQUIRE', 'c:4', '1', '60000')) as unknown[])[0]).toBe(0);
  });

  it('RESP3: a map with id last; redis-cli shows the same fields', async () => {
    await at(30_000);
    const m = (await env.r3.call('RL.ACQUIRE', 'c:5', '1', '100', 'ID', 'q')) as unknown;
    expect(pairs(m)).toEqual([['limited', 0], ['limit', 1], ['remaining', 0], ['retry_after_ms', -1], ['reset_after_ms', 100], ['delay_ms', 0], ['id', 'q']]);
    const limited = (await env.r3.call('RL.ACQUIRE', 'c:5', '1', '100')) as unknown;
    expect(pairs(limited)[6]).toEqual(['id', null]);
    const cli = execFileSync('redis-cli', ['-p', String(env.server.port), '-3', 'RL.ACQUIRE', 'c:5', '1', '100'], { encoding: 'utf8' });
    // Not a terminal: redis-cli prints a map's pairs one a line.
    expect(cli.split('\n')).toEqual(['limited 1', 'limit 1', 'remaining 0', 'retry_after_ms 100', 'reset_after_ms 100', 'delay_ms 0', 'id ', '']);
    const cli2 = execFileSync('redis-cli', ['-p', String(env.server.port), 'RL.ACQUIRE', 'c:6', '1', '100', 'ID', 'z'], { encoding: 'utf8' });
    expect(cli2.trim().split('\n')).toEqual(['0', '1', '0', '-1', '100', '0', 'z']);
  });

  it('refuses bad arguments, the largest limit and beyond, and changes nothing', async () => {
    const r = env.r2;
    await at(40_000);
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', String(2 ** 53), '100'))).toBe(`ERR invalid limit '${2 ** 53}': must be <= 10000`);
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '10001', '100'))).toBe("ERR invalid limit '10001': must be <= 10000");
    expect(((await r.call('RL.ACQUIRE', 'c:7b', '10000', '100')) as unknown[])[2]).toBe(9999);
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '0', '100'))).toBe("ERR invalid limit '0': must be >= 1");
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '0'))).toBe("ERR invalid lease_ms '0': must be >= 1");
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '10', 'ID', 'x'.repeat(65)))).toBe('ERR invalid id: must be 1 to 64 bytes');
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '10', 'ID', ''))).toBe('ERR invalid id: must be 1 to 64 bytes');
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '10', 'ID', 'a', 'ID', 'b'))).toBe('ERR syntax error');
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '10', 'WAIT'))).toBe('ERR syntax error');
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:7', '1', '10', 'WAIT', '-1'))).toBe("ERR invalid WAIT timeout_ms '-1': must be >= 0");
    expect(await errorOf(r.call('RL.RENEW', 'c:7', 'a', 'x'))).toBe("ERR invalid lease_ms 'x': not an integer");
    expect(await r.exists('c:7')).toBe(0);
    await r.call('RL.TOKENBUCKET', 'c:tb', '5', '1000');
    expect(await errorOf(r.call('RL.ACQUIRE', 'c:tb', '1', '10'))).toMatch(/^WRONGTYPE/);
    expect(await errorOf(r.call('RL.RELEASE', 'c:tb', 'a'))).toMatch(/^WRONGTYPE/);
    await r.call('RL.ACQUIRE', 'c:8', '1', '1000');
    expect(await errorOf(r.call('RL.TOKENBUCKET', 'c:8', '5', '1000'))).toMatch(/^WRONGTYPE/);
    // A blocked key refuses an ACQUIRE for the block's time.
    await r.call('RL.BLOCK', 'c:blk', '700');
    expect(await r.call('RL.ACQUIRE', 'c:blk', '5', '10')).toEqual([1, 5, 0, 700, 700, 0, null]);
  });

  it('a pipeline alternating ACQUIRE and RELEASE: each counted as itself in commandstats, across CONFIG RESETSTAT', async () => {
    const r = env.r2;
    await at(60_000);
    const calls = async (name: string): Promise<number> =>
      Number(new RegExp(`^cmdstat_${name.replace('.', '\\.')}:calls=(\\d+)`, 'm').exec((await r.info('commandstats')) as string)?.[1] ?? 0);
    await r.config('RESETSTAT');
    const p = r.pipeline();
    for (let i = 0; i < 500; i++) p.call('RL.ACQUIRE', 'c:pipe', '1', '1000', 'ID', `p${i}`).call('RL.RELEASE', 'c:pipe', `p${i}`);
    const out = (await p.exec())!;
    expect(out.every(([e], i) => e === null && (i % 2 === 1 ? out[i][1] === 1 : (out[i][1] as unknown[])[0] === 0))).toBe(true);
    expect([await calls('rl.acquire'), await calls('rl.release')]).toEqual([500, 500]);
    const q = r.pipeline().call('RL.ACQUIRE', 'c:pipe', '1', '1000', 'ID', 'x').config('RESETSTAT').call('RL.RELEASE', 'c:pipe', 'x').call('RL.ACQUIRE', 'c:pipe', '1', '1000', 'ID', 'y');
    await q.exec();
    expect([await calls('rl.acquire'), await calls('rl.release')]).toEqual([1, 1]);
  });

  it('in MULTI a WAIT does not block; COMMAND INFO, ACL @limiter and INFO counts', async () => {
    const r = env.r2;
    await at(50_000);
    await r.call('RL.ACQUIRE', 'c:9', '1', '1000', 'ID', 'held');
    const res = await r.multi().call('RL.ACQUIRE', 'c:9', '1', '1000', 'WAIT', '0').call('RL.RELEASE', 'c:9', 'held').exec();
    expect(res![0][1]).toEqual([1, 1, 0, 1000, 1000, 0, null]);
    expect(res![1][1]).toBe(1);
    const info = (await r.call('COMMAND', 'INFO', 'rl.acquire', 'rl.release', 'rl.renew')) as unknown[][];
    expect(info.map((c) => [c[0], c[1]])).toEqual([['rl.acquire', -4], ['rl.release', 3], ['rl.renew', 4]]);
    expect(String(info[0][6])).toContain('@limiter');
    await r.call('ACL', 'SETUSER', 'app', 'on', '>pw', '~*', '+@limiter');
    const app = env.r2.duplicate();
    await app.call('AUTH', 'app', 'pw');
    expect(((await app.call('RL.ACQUIRE', 'c:acl', '1', '100')) as unknown[])[0]).toBe(0);
    expect(await errorOf(app.call('FLUSHALL'))).toMatch(/^NOPERM/);
    app.disconnect();
    const [, found] = (await r.call('SCAN', '0', 'TYPE', 'concurrency', 'COUNT', '1000')) as [string, string[]];
    expect(found).toContain('c:acl');
    expect(found).not.toContain('c:tb');
    expect(await errorOf(r.call('CLIENT', 'UNBLOCK', 'x'))).toBe('ERR value is not an integer or out of range');
    expect(await errorOf(r.call('CLIENT', 'UNBLOCK', '1', 'LATER'))).toBe('ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR');
    expect(await r.call('CLIENT', 'UNBLOCK', '999999')).toBe(0);
    const text = (await r.info('limiter')) as string;
    expect(text).toMatch(/limiter_rl\.acquire:allowed=\d+,limited=\d+/);
    expect(text).toMatch(/keys_concurrency:\d+/);
  });
});
