/**
 * ACL key patterns as the dispatcher checks them (literal and `prefix*` patterns compared on the key
 * bytes, the rest through the glob matcher): every pattern shape gives the answer Redis's glob gives,
 * for commands whose keys arrive as bytes over the wire, binary and non-ASCII keys included.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { globMatch } from '../../src/glob.js';
import { useServer } from '../helpers/server.js';

const PATTERNS = ['app:*', 'exact', '', 'a**', 'pre\\*fix*', 'x?y*', '[ab]c*', 'é:*', 'bin\u00ff*', '*:tail'];
const KEYS = ['app:', 'app:1', 'ap', 'APP:1', 'exact', 'exact1', 'exac', 'a', 'abc', 'pre*fix', 'pre*fix:1', 'prefix', 'xzy', 'xy', 'ac', 'bc9', 'cc',
  'é:1', 'é', '\u00c3\u00a9:1', 'bin\u00ff', 'bin\u00ff\u0000z', 'bin', 'k:tail', 'tail', 'z'];

describe('ACL key patterns checked on the key bytes', () => {
  const env = useServer();
  let app: Redis;
  beforeAll(async () => {
    for (const [i, pattern] of PATTERNS.entries()) {
      const rules = ['on', '>pw', `~${pattern}`, '+@limiter'];
      expect(await env.redis.call('ACL', 'SETUSER', `u${i}`, ...rules)).toBe('OK');
    }
    // Read-only and write-only patterns: CL.THROTTLE writes its key, so only %W~ / %RW~ let it through.
    expect(await env.redis.call('ACL', 'SETUSER', 'ro', 'on', '>pw', '%R~app:*', '+@limiter')).toBe('OK');
    expect(await env.redis.call('ACL', 'SETUSER', 'rw', 'on', '>pw', '%R~app:*', '%W~app:*', '+@limiter')).toBe('OK');
    app = new Redis({ port: env.server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    await app.connect();
  });
  afterAll(() => app?.disconnect());

  const throttle = async (key: string): Promise<string> => {
    try {
      await app.call('CL.THROTTLE', Buffer.from(key, 'latin1'), '10', '10', '60');
      return 'ok';
    } catch (e) {
      return (e as Error).message.split(' ')[0];
    }
  };

  it('each pattern allows exactly the keys the glob matcher matches', async () => {
    for (const [i, pattern] of PATTERNS.entries()) {
      await app.call('AUTH', `u${i}`, 'pw');
      // Patterns are stored as the bytes given (UTF-8 for 'é' from ioredis), keys sent as latin1 bytes.
      const patternBytes = Buffer.from(pattern, 'utf8').toString('latin1');
      for (const key of KEYS) {
        const expected = globMatch(patternBytes, key) ? 'ok' : 'NOPERM';
        expect(`${pattern} ${JSON.stringify(key)} ${await throttle(key)}`).toBe(`${pattern} ${JSON.stringify(key)} ${expected}`);
      }
    }
  });

  it('the access bits still apply: a read-only pattern refuses a write, read+write allows it', async () => {
    await app.call('AUTH', 'ro', 'pw');
    expect(await throttle('app:1')).toBe('NOPERM');
    await app.call('AUTH', 'rw', 'pw');
    expect(await throttle('app:1')).toBe('ok');
    expect(await throttle('other')).toBe('NOPERM');
  });
});
