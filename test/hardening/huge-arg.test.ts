/**
 * An argument as long as proto-max-bulk-len allows (512 MiB by default) is longer than V8's longest
 * string (just under 512 MiB): the server must never make a string of it. Keys are looked up by
 * their bytes, and messages (unknown command, the slow log) quote at most 128 bytes. One huge
 * argument at a time, written in 1 MiB chunks from a raw socket (the same chunk over and over).
 */
import { constants } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { useServer } from '../helpers/server.js';
import { Checker, mbulk, parseReplies, processAlive, RawConnection, type Reply } from '../helpers/raw.js';

/** Longer than any string V8 can make, within the default proto-max-bulk-len (536870912). */
const HUGE = constants.MAX_STRING_LENGTH + 12;
const CHUNK = Buffer.alloc(1024 * 1024, 'a');

/**
 * Sends a command whose argument `hugeAt` is HUGE bytes of 'a' (the others as given) and returns
 * the one reply.
 */
async function sendHuge(port: number, args: string[], hugeAt: number, auth?: [string, string]): Promise<Reply> {
  const conn = await RawConnection.open(port);
  try {
    if (auth !== undefined) await conn.write(mbulk('AUTH', ...auth));
    const all = [...args];
    all.splice(hugeAt, 0, '');
    let head = `*${all.length}\r\n`;
    for (let i = 0; i < all.length; i++) {
      if (i === hugeAt) break;
      head += `$${all[i].length}\r\n${all[i]}\r\n`;
    }
    await conn.write(`${head}$${HUGE}\r\n`);
    let left = HUGE;
    while (left > 0) {
      const n = Math.min(left, CHUNK.length);
      await conn.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n));
      left -= n;
    }
    let tail = '\r\n';
    for (let i = hugeAt + 1; i < all.length; i++) tail += `$${all[i].length}\r\n${all[i]}\r\n`;
    await conn.write(tail);
    const expected = auth === undefined ? 1 : 2;
    await conn.waitFor(() => parseReplies(conn.received).replies.length >= expected || conn.ended, 120_000, 'the reply');
    const { replies } = parseReplies(conn.received);
    expect(replies.length).toBe(expected);
    if (auth !== undefined) expect(replies[0]).toBe('OK');
    return replies[replies.length - 1];
  } finally {
    conn.destroy();
  }
}

describe('a 512 MiB argument', () => {
  const env = useServer({ args: ['--slowlog-log-slower-than', '0', '--slowlog-max-len', '4'] });

  it('DEL, EXISTS, an unknown command, the slow log and CL.THROTTLE with it as the key: correct replies, the server stays up', async () => {
    const { server, redis } = env;
    // A frozen clock: the key CL.THROTTLE makes must not expire while 512 MiB commands crawl in.
    await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    expect(await sendHuge(server.port, ['DEL'], 1)).toBe(0);
    expect(await sendHuge(server.port, ['EXISTS', 'small'], 2)).toBe(0);
    const unknown = await sendHuge(server.port, ['x'], 0);
    expect(unknown).toEqual({ error: `ERR unknown command '${'a'.repeat(128)}', with args beginning with: 'x' ` });
    // The key is looked up and created by its bytes.
    expect(await sendHuge(server.port, ['CL.THROTTLE', '5', '10', '60'], 1)).toEqual([0, 6, 5, -1, 6]);
    const checker = await Checker.open(server.port);
    try {
      // The slow log keeps 128 bytes of it, marked as cut (every command is logged here).
      const log = (await checker.call('SLOWLOG', 'GET', '2')) as Reply[][];
      const throttled = log.find((e) => (e[3] as string[])[0] === 'CL.THROTTLE')!;
      expect((throttled[3] as string[])[1]).toBe(`${'a'.repeat(128)}... (${HUGE - 128} more bytes)`);
      expect(await checker.call('DBSIZE')).toBe(1);
      expect(await sendHuge(server.port, ['EXISTS'], 1)).toBe(1);
      expect(await sendHuge(server.port, ['DEL'], 1)).toBe(1);
      expect(await checker.call('DBSIZE')).toBe(0);
      // A user with key patterns: a key too long to become text matches none of them (NOPERM), and
      // the ACL log keeps its first 1 KiB, marked as cut.
      expect(await checker.call('ACL', 'SETUSER', 'patterned', 'on', '>pw', '~app:*', '+@all')).toBe('OK');
      expect(await sendHuge(server.port, ['CL.THROTTLE', '5', '10', '60'], 1, ['patterned', 'pw'])).toEqual({ error: 'NOPERM No permissions to access a key' });
      const entry = ((await checker.call('ACL', 'LOG', '1')) as Reply[][])[0];
      expect(entry[7]).toBe(`${'a'.repeat(1024)}... (${HUGE - 1024} more bytes)`);
      expect(await checker.call('PING')).toBe('PONG');
    } finally {
      checker.close();
    }
    expect(processAlive(server)).toBe(true);
  }, 600_000);
});
