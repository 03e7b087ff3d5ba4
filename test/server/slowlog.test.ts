/**
 * SLOWLOG as Redis: entries for commands at or over slowlog-log-slower-than, newest first, capped
 * at slowlog-max-len, long arguments cut as Redis cuts them, passwords redacted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, type RunningServer } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';

let server: RunningServer;
let redis: Redis;

beforeAll(async () => {
  server = await startServer();
  redis = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
});

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

describe('SLOWLOG', () => {
  it('logs slow commands newest first with Redis\'s entry shape', async () => {
    await redis.call('CONFIG', 'SET', 'slowlog-log-slower-than', '50000');
    await redis.call('SLOWLOG', 'RESET');
    await redis.call('CLIENT', 'SETNAME', 'slowpoke');
    await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    await redis.call('DEBUG', 'SLEEP', '0.06');
    await redis.call('PING'); // fast: not logged
    await redis.call('DEBUG', 'SLEEP', '0.07');
    expect(await redis.call('SLOWLOG', 'LEN')).toBe(2);
    const entries = (await redis.call('SLOWLOG', 'GET')) as [number, number, number, string[], string, string][];
    expect(entries.length).toBe(2);
    const [newest, oldest] = entries;
    expect(newest[0]).toBe(oldest[0] + 1);
    expect(newest[1]).toBe(1800000000); // the server clock, in seconds
    expect(newest[2]).toBeGreaterThanOrEqual(70_000);
    expect(newest[3]).toEqual(['DEBUG', 'SLEEP', '0.07']);
    expect(newest[4]).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(newest[5]).toBe('slowpoke');
    expect(((await redis.call('SLOWLOG', 'GET', '1')) as unknown[]).length).toBe(1);
    expect(await errorOf(redis.call('SLOWLOG', 'GET', '-2'))).toBe('ERR count should be greater than or equal to -1');
    expect(await redis.call('SLOWLOG', 'RESET')).toBe('OK');
    expect(await redis.call('SLOWLOG', 'LEN')).toBe(0);
  });

  it('cuts long arguments and argument lists, redacts AUTH, and keeps at most slowlog-max-len', async () => {
    await redis.call('CONFIG', 'SET', 'slowlog-log-slower-than', '0', 'slowlog-max-len', '3');
    await redis.call('SLOWLOG', 'RESET');
    await redis.call('ECHO', 'x'.repeat(200));
    await redis.call('DEL', ...Array.from({ length: 40 }, (_, i) => `k${i}`));
    await redis.call('AUTH', 'default', 'secret').catch(() => undefined);
    const entries = (await redis.call('SLOWLOG', 'GET', '-1')) as [number, number, number, string[], string, string][];
    expect(entries.length).toBe(3); // SLOWLOG RESET itself was pushed out
    const [auth, del, echo] = entries;
    expect(auth[3]).toEqual(['AUTH', '(redacted)', '(redacted)']);
    expect(del[3].length).toBe(32);
    expect(del[3][31]).toBe('... (10 more arguments)');
    expect(echo[3]).toEqual(['ECHO', `${'x'.repeat(128)}... (72 more bytes)`]);
    await redis.call('CONFIG', 'SET', 'slowlog-log-slower-than', '-1');
    await redis.call('SLOWLOG', 'RESET');
    await redis.call('PING');
    expect(await redis.call('SLOWLOG', 'LEN')).toBe(0);
  });
});
