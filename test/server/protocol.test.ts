/**
 * Protocol robustness over raw TCP sockets, in the spirit of Redis's tests/unit/protocol.tcl: what the
 * server answers to malformed, split, huge, binary and pipelined input, byte for byte, and that no
 * input takes it down or disturbs other connections. Expected bytes were checked against a real
 * redis-server 7.0 where Redis and cellgate share the behaviour.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import fc from 'fast-check';
import { startServer, type RunningServer } from '../helpers/server.js';
import {
  Checker, RawConnection, bulkReply, exchange, expectAnswerThenClose, expectAnswerThenPong, infoField, mbulk, parseReplies,
  prng, processAlive, randomBytes, type Reply,
} from '../helpers/raw.js';
import { frameWithSplits } from '../helpers/frames.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

// ---------------------------------------------------------------------------------------------

let server: RunningServer;
let authServer: RunningServer;
let smallBulkServer: RunningServer;

beforeAll(async () => {
  [server, authServer, smallBulkServer] = await Promise.all([
    startServer(),
    startServer({ args: ['--requirepass', 'x'] }),
    startServer({ args: ['--proto-max-bulk-len', '1mb'] }),
  ]);
});

afterAll(async () => {
  const alive = [server, authServer, smallBulkServer].map((s) => s !== undefined && processAlive(s));
  await Promise.all([server?.stop(), authServer?.stop(), smallBulkServer?.stop()]);
  // No input in this file may take a server down: each must still have been running at the end.
  expect(alive).toEqual([true, true, true]);
});

describe('malformed requests (tests/unit/protocol.tcl)', () => {
  it('handles an empty query', async () => {
    await expectAnswerThenPong(server.port, '\r\n', '');
    await expectAnswerThenPong(server.port, '   \t\r\n\n', '');
  });

  it('ignores a negative multibulk length', async () => {
    await expectAnswerThenPong(server.port, '*-10\r\n', '');
    await expectAnswerThenPong(server.port, '*-1\r\n', '');
  });

  it('ignores *0', async () => {
    await expectAnswerThenPong(server.port, '*0\r\n', '');
    await expectAnswerThenPong(server.port, '*0\r\n*0\r\n*-1\r\n', '');
  });

  it('rejects an out of range multibulk length and closes', async () => {
    await expectAnswerThenClose(server.port, '*3000000000\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
    await expectAnswerThenClose(server.port, '*2147483648\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
    // Beyond 64 bits string2ll fails: invalid, even though it is "negative".
    await expectAnswerThenClose(server.port, '*-9223372036854775809\r\nPING\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
    await expectAnswerThenClose(server.port, '*99999999999999999999\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
  });

  it('accepts the most negative 64-bit multibulk length as "nothing"', async () => {
    await expectAnswerThenPong(server.port, '*-9223372036854775808\r\n', '');
  });

  it('rejects a non-number multibulk length (string2ll rules: no sign, no leading zero, no space)', async () => {
    for (const header of ['*blabla', '*+1', '*01', '*1 ', '* 1', '*-0', '*-', '*', '*1.0', '*0x1']) {
      await expectAnswerThenClose(server.port, `${header}\r\n$4\r\nPING\r\n`, '-ERR Protocol error: invalid multibulk length\r\n');
    }
  });

  it("rejects a wrong multibulk payload header with expected '$', got 'X'", async () => {
    await expectAnswerThenClose(server.port, '*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n', "-ERR Protocol error: expected '$', got 'f'\r\n");
    await expectAnswerThenClose(server.port, '*1\r\nfoo\r\n', "-ERR Protocol error: expected '$', got 'f'\r\n");
    // CR and LF in the message become spaces, as addReplyError does.
    await expectAnswerThenClose(server.port, '*1\r\n\r\n', "-ERR Protocol error: expected '$', got ' '\r\n");
    // A byte above 0x7f is echoed as that byte.
    await expectAnswerThenClose(server.port, Buffer.from('*1\r\n\xe9\r\n', 'latin1'), "-ERR Protocol error: expected '$', got '\xe9'\r\n");
  });

  it('rejects negative, out of range and non-number bulk lengths', async () => {
    const invalid = '-ERR Protocol error: invalid bulk length\r\n';
    await expectAnswerThenClose(server.port, '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n', invalid);
    await expectAnswerThenClose(server.port, '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n', invalid);
    await expectAnswerThenClose(server.port, '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n', invalid);
    await expectAnswerThenClose(server.port, '*1\r\n$-1\r\n', invalid);
    await expectAnswerThenClose(server.port, '*1\r\n$-0\r\n', invalid);
    await expectAnswerThenClose(server.port, '*1\r\n$01\r\nx\r\n', invalid);
    await expectAnswerThenClose(server.port, '*1\r\n$\r\n', invalid);
    await expectAnswerThenClose(server.port, '*1\r\n$-9223372036854775809\r\n', invalid);
  });

  it('rejects a bulk of proto-max-bulk-len + 1 and accepts one of exactly proto-max-bulk-len', async () => {
    const max = 1024 * 1024;
    await expectAnswerThenClose(smallBulkServer.port, `*2\r\n$4\r\nECHO\r\n$${max + 1}\r\n`, '-ERR Protocol error: invalid bulk length\r\n');
    const value = randomBytes(max, 7);
    const { text, conn } = await exchange(smallBulkServer.port, mbulk('ECHO', value), bulkReply(value).toString('latin1'));
    conn.destroy();
    expect(text === bulkReply(value).toString('latin1')).toBe(true);
  });

  it('rejects more than 10 arguments and bulks over 16 KiB before AUTH', async () => {
    await expectAnswerThenClose(authServer.port, '*11\r\n', '-ERR Protocol error: unauthenticated multibulk length\r\n');
    await expectAnswerThenClose(authServer.port, '*100\r\n', '-ERR Protocol error: unauthenticated multibulk length\r\n');
    await expectAnswerThenClose(authServer.port, '*1\r\n$16385\r\n', '-ERR Protocol error: unauthenticated bulk length\r\n');
    await expectAnswerThenClose(authServer.port, '*1\r\n$100000000\r\n', '-ERR Protocol error: unauthenticated bulk length\r\n');
    // The limits themselves are fine (and the command then meets the auth gate).
    const auth: [string, string] = ['AUTH x\r\n', '+OK\r\n'];
    await expectAnswerThenPong(authServer.port, mbulk('ECHO', Buffer.alloc(16384, 0x61)), '-NOAUTH Authentication required.\r\n', auth);
    await expectAnswerThenPong(authServer.port, mbulk('PING', '1', '2', '3', '4', '5', '6', '7', '8', '9'), '-NOAUTH Authentication required.\r\n', auth);
    // An out of range count is "invalid" before it is "unauthenticated", as in Redis.
    await expectAnswerThenClose(authServer.port, '*3000000000\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
  });

  it('lifts the pre-AUTH limits for the rest of the same packet once AUTH succeeds', async () => {
    const value = Buffer.alloc(20000, 0x62);
    const payload = Buffer.concat([mbulk('AUTH', 'x'), mbulk('ECHO', value), mbulk('PING', ...Array.from({ length: 11 }, () => 'a'))]);
    const expected = '+OK\r\n' + bulkReply(value).toString('latin1') + "-ERR wrong number of arguments for 'ping' command\r\n";
    const { text, conn } = await exchange(authServer.port, payload, expected);
    conn.destroy();
    expect(text).toBe(expected);
  });

  it('rejects a too big inline request (64 KiB without a newline)', async () => {
    await expectAnswerThenClose(server.port, 'a'.repeat(64 * 1024 + 1), '-ERR Protocol error: too big inline request\r\n');
  });

  it('waits for the newline of an inline request of exactly 64 KiB', async () => {
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write('a'.repeat(64 * 1024));
      await delay(100);
      expect(conn.length).toBe(0);
      expect(conn.ended).toBe(false);
    } finally {
      conn.destroy();
    }
  });

  it('rejects too big mbulk and bulk count strings', async () => {
    await expectAnswerThenClose(server.port, '*' + '1'.repeat(64 * 1024 + 1), '-ERR Protocol error: too big mbulk count string\r\n');
    await expectAnswerThenClose(server.port, '*1\r\n$' + '1'.repeat(64 * 1024 + 1), '-ERR Protocol error: too big bulk count string\r\n');
  });

  it('rejects unbalanced quotes in an inline request', async () => {
    const unbalanced = '-ERR Protocol error: unbalanced quotes in request\r\n';
    for (const line of ['ECHO "abc', "ECHO 'abc", 'ECHO "a"b', "ECHO 'a'b", 'ECHO a"b c"d', 'ECHO "a\\"', "ECHO 'a\\'"]) {
      await expectAnswerThenClose(server.port, `${line}\r\n`, unbalanced);
    }
  });
});

describe('inline commands', () => {
  // Each case was checked against redis-server 7.0 (sdssplitargs).
  const cases: [string, string][] = [
    ['ECHO "a\\x41\\n"', '$3\r\naA\n\r\n'],
    ["ECHO 'it\\'s'", "$4\r\nit's\r\n"],
    ['ECHO "\\t\\r\\b\\a\\\\\\"\\q"', '$7\r\n\t\r\b\x07\\"q\r\n'],
    ['ECHO "\\xzz"', '$3\r\nxzz\r\n'],
    ['ECHO "\\xFf\\x00"', '$2\r\n\xff\x00\r\n'],
    ["ECHO 'a\\nb'", '$4\r\na\\nb\r\n'],
    ['ECHO ""', '$0\r\n\r\n'],
    ["ECHO ''", '$0\r\n\r\n'],
    ['ECHO a"b c"', '$4\r\nab c\r\n'],
    ['ECHO "a b"  ', '$3\r\na b\r\n'],
    ['  \tECHO\t\tx', '$1\r\nx\r\n'],
    ['ECHO a\x0bb', '$3\r\na\x0bb\r\n'],
    ['PING\x0b', "-ERR unknown command 'PING\x0b', with args beginning with: \r\n"],
    ['\x0bPING', '+PONG\r\n'],
    ['ping', '+PONG\r\n'],
  ];
  it.each(cases)('%j', async (line, expected) => {
    await expectAnswerThenPong(server.port, `${line}\r\n`, expected);
  });

  it('accepts \\n-only line endings', async () => {
    await expectAnswerThenPong(server.port, 'PING\nECHO x\n\nECHO "y"\n', '+PONG\r\n$1\r\nx\r\n$1\r\ny\r\n');
  });

  it('mixes inline and multibulk requests in one packet', async () => {
    await expectAnswerThenPong(server.port, Buffer.concat([Buffer.from('ECHO a\r\n'), mbulk('ECHO', 'b'), Buffer.from('ECHO c\n')]), '$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n');
  });
});

describe('protocol errors and other requests', () => {
  it('answers the commands before a protocol error in the same packet, then the error, then closes', async () => {
    await expectAnswerThenClose(
      server.port,
      Buffer.concat([Buffer.from('PING\r\n'), mbulk('ECHO', 'x'), Buffer.from('*1\r\nfoo\r\nPING\r\n')]),
      "+PONG\r\n$1\r\nx\r\n-ERR Protocol error: expected '$', got 'f'\r\n",
    );
    await expectAnswerThenClose(server.port, 'PING\r\nECHO "x\r\nPING\r\n', '+PONG\r\n-ERR Protocol error: unbalanced quotes in request\r\n');
  });

  it('keeps other connections working after a protocol error', async () => {
    const other = await Checker.open(server.port);
    try {
      expect(await other.call('PING')).toBe('PONG');
      await expectAnswerThenClose(server.port, '*1\r\nfoo\r\n', "-ERR Protocol error: expected '$', got 'f'\r\n");
      expect(await other.call('PING')).toBe('PONG');
      expect(await other.call('ECHO', 'still here')).toBe('still here');
    } finally {
      other.close();
    }
  });

  it('really closes the connection after a protocol error, even if the peer keeps writing', async () => {
    // A peer that does not close its side on EOF (Tcl's socket in protocol.tcl's desync tests):
    // Redis frees the client after the reply, so further writes fail and the fd is released.
    const checker = await Checker.open(server.port);
    const conn = await RawConnection.open(server.port, { allowHalfOpen: true });
    try {
      const baseline = Number(infoField(await checker.call('INFO', 'clients'), 'connected_clients'));
      await conn.write('*1\r\nfoo\r\n');
      await conn.waitForEnd();
      expect(conn.text()).toBe("-ERR Protocol error: expected '$', got 'f'\r\n");
      const deadline = Date.now() + WAIT_LIMIT_MS;
      while (!conn.closed && Date.now() < deadline) {
        await conn.write('PING\r\n');
        await delay(10);
      }
      expect(conn.closed).toBe(true);
      expect(conn.errorCode === null || ['EPIPE', 'ECONNRESET'].includes(conn.errorCode)).toBe(true);
      let connected = baseline;
      while (connected !== baseline - 1 && Date.now() < deadline) {
        connected = Number(infoField(await checker.call('INFO', 'clients'), 'connected_clients'));
        if (connected !== baseline - 1) await delay(10);
      }
      expect(connected).toBe(baseline - 1);
    } finally {
      conn.destroy();
      checker.close();
    }
  });

  it('really closes the connection after QUIT, even if the peer keeps the socket open', async () => {
    const conn = await RawConnection.open(server.port, { allowHalfOpen: true });
    try {
      await conn.write('QUIT\r\nPING\r\n');
      await conn.waitForEnd();
      expect(conn.text()).toBe('+OK\r\n');
      const deadline = Date.now() + WAIT_LIMIT_MS;
      while (!conn.closed && Date.now() < deadline) {
        await conn.write('PING\r\n');
        await delay(10);
      }
      expect(conn.closed).toBe(true);
    } finally {
      conn.destroy();
    }
  });

  // protocol.tcl's "Protocol desync regression test": after a stray NUL, endless data must end in a
  // protocol error and a closed connection. Redis scans for the line end with strchr, so a NUL before
  // it hides the line end: the request never completes and the size limit ends it.
  it.each([['\\x00', '\x00'], ['*\\x00', '*\x00'], ['$\\x00', '$\x00']])('desync regression: %s then endless lines', async (_name, seq) => {
    const conn = await RawConnection.open(server.port, { allowHalfOpen: true });
    try {
      await conn.write(seq);
      const line = 'A'.repeat(1024) + '\n';
      const deadline = Date.now() + WAIT_LIMIT_MS;
      while (!conn.closed && Date.now() < deadline) {
        await conn.write(line.repeat(8));
        await delay(1);
      }
      expect(conn.closed).toBe(true);
      expect(conn.text()).toMatch(/^-ERR Protocol error: too big (inline request|mbulk count string)\r\n$/);
    } finally {
      conn.destroy();
    }
  });

  it('waits at a NUL inside a header or inline line as Redis does, instead of running what follows', async () => {
    for (const payload of ['\x00PING\r\n', 'PI\x00NG\r\nPING\r\n', '*1\x00\r\n$4\r\nPING\r\n', '*1\r\n$4\x00\r\nPING\r\n']) {
      const conn = await RawConnection.open(server.port);
      try {
        await conn.write(payload);
        await delay(50);
        expect([payload, conn.text(), conn.ended]).toEqual([payload, '', false]);
      } finally {
        conn.destroy();
      }
    }
  });

  it('does not check the bytes after a bulk (Redis skips its CRLF unread)', async () => {
    await expectAnswerThenPong(server.port, '*1\r\n$4\r\nPINGxx', '+PONG\r\n');
    await expectAnswerThenPong(server.port, '*1\r\n$4\rxPING\r\n', '+PONG\r\n');
  });
});

describe('framing', () => {
  // A small pipeline touching every parser state: inline, multibulk, an empty bulk, a bulk holding
  // CRLF, *0 and *-1, a quoted inline argument.
  const pipeline = Buffer.concat([
    Buffer.from('PING\r\n'),
    mbulk('ECHO', 'he\r\nllo'),
    Buffer.from('*0\r\n*-1\r\n'),
    mbulk('ECHO', ''),
    Buffer.from('ECHO "a b"\n'),
    mbulk('PING'),
  ]);
  const expected = '+PONG\r\n$7\r\nhe\r\nllo\r\n$0\r\n\r\n$3\r\na b\r\n+PONG\r\n';

  it('answers a pipeline delivered one byte at a time', async () => {
    const conn = await RawConnection.open(server.port);
    try {
      for (let i = 0; i < pipeline.length; i++) {
        await conn.write(pipeline.subarray(i, i + 1));
        await delay(1);
      }
      await conn.waitForBytes(expected.length);
      expect(conn.text()).toBe(expected);
    } finally {
      conn.destroy();
    }
  });

  it('answers a pipeline split at every byte boundary', async () => {
    const results: string[] = [];
    for (let cut = 1; cut < pipeline.length; cut++) {
      const conn = await RawConnection.open(server.port);
      try {
        await conn.write(pipeline.subarray(0, cut));
        await delay(2);
        await conn.write(pipeline.subarray(cut));
        await conn.waitForBytes(expected.length);
        results.push(conn.text());
      } finally {
        conn.destroy();
      }
    }
    expect(results).toEqual(Array.from({ length: pipeline.length - 1 }, () => expected));
  });

  it('answers a 10,000-command pipeline sent in one write, in order', async () => {
    const checker = await Checker.open(server.port);
    await checker.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    const n = 10_000;
    const parts: Buffer[] = [];
    for (let i = 0; i < n; i++) {
      parts.push(i % 2 === 0 ? mbulk('ECHO', `m${i}`) : mbulk('CL.THROTTLE', 'pipeline:key', '99999', '1', '1'));
    }
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write(Buffer.concat(parts));
      let parsed: Reply[] = [];
      await conn.waitFor(() => {
        const { replies } = parseReplies(conn.received);
        parsed = replies;
        return replies.length >= n || conn.ended;
      }, 20_000, `${n} replies`);
      expect(parsed.length).toBe(n);
      const echoes = parsed.filter((_, i) => i % 2 === 0);
      expect(echoes).toEqual(Array.from({ length: n / 2 }, (_, j) => `m${2 * j}`));
      // With the clock frozen, every call spends one token: remaining counts down one by one.
      const remaining = parsed.filter((_, i) => i % 2 === 1).map((r) => (r as number[])[2]);
      expect(remaining).toEqual(Array.from({ length: n / 2 }, (_, j) => 99999 - j));
      expect(parseReplies(conn.received).rest).toBe(0);
    } finally {
      conn.destroy();
      await checker.call('DEBUG', 'CLOCK', 'REAL');
      await checker.call('DEL', 'pipeline:key');
      checker.close();
    }
  });

  it('answers every command of a pipeline followed at once by the client closing its side', async () => {
    // Node reads 64 KiB at a time and, when a read fills its buffer, reads on: a pipeline of exactly
    // 64 or 128 KiB is then read to its FIN in the same turn, before the replies of that turn go out.
    // DEBUG SLEEP on another connection makes sure the bytes and the FIN are all waiting together.
    const blocker = await Checker.open(server.port);
    try {
      for (const total of [65536, 131072]) {
        const n = Math.floor((total - 16) / 6);
        const payload = Buffer.concat([Buffer.from('PING\r\n'.repeat(n)), Buffer.from(`PING${' '.repeat(total - n * 6 - 6)}\r\n`)]);
        expect(payload.length).toBe(total);
        const sleeping = blocker.call('DEBUG', 'SLEEP', '0.1');
        await delay(20);
        const received = await new Promise<Buffer>((resolve, reject) => {
          const chunks: Buffer[] = [];
          const socket = net.connect({ port: server.port, host: '127.0.0.1' }, () => socket.end(payload));
          socket.on('data', (d: Buffer) => chunks.push(d));
          socket.on('error', reject);
          socket.on('close', () => resolve(Buffer.concat(chunks)));
        });
        await sleeping;
        expect(received.length / 7).toBe(n + 1);
        expect(received.equals(Buffer.from('+PONG\r\n'.repeat(n + 1)))).toBe(true);
      }
    } finally {
      blocker.close();
    }
  });

  it('reassembles a 5 MB argument arriving in many chunks, with a pipeline behind it', async () => {
    const value = randomBytes(5 * 1024 * 1024, 42);
    const frame = Buffer.concat([mbulk('ECHO', value), mbulk('PING'), Buffer.from('ECHO tail\r\n')]);
    const expected = Buffer.concat([bulkReply(value), Buffer.from('+PONG\r\n$4\r\ntail\r\n')]);
    const conn = await RawConnection.open(server.port);
    try {
      const next = prng(99);
      let writes = 0;
      for (let pos = 0; pos < frame.length; writes++) {
        // Chunks from 1 byte to 128 KiB, so headers and the big bulk are cut anywhere.
        const size = writes < 20 ? 1 + next(7) : 1 + next(128 * 1024);
        await conn.write(frame.subarray(pos, pos + size));
        pos += size;
      }
      expect(writes).toBeGreaterThan(50);
      await conn.waitForBytes(expected.length, 20_000);
      expect(conn.length).toBe(expected.length);
      expect(conn.received.equals(expected)).toBe(true);
    } finally {
      conn.destroy();
    }
  });

  it('reads two big arguments of one command', async () => {
    const a = randomBytes(100_000, 1);
    const b = randomBytes(70_000, 2);
    const conn = await RawConnection.open(server.port);
    try {
      const frame = Buffer.concat([mbulk('EXISTS', a, b), mbulk('ECHO', b)]);
      for (let pos = 0; pos < frame.length; pos += 9000) await conn.write(frame.subarray(pos, pos + 9000));
      const expected = Buffer.concat([Buffer.from(':0\r\n'), bulkReply(b)]);
      await conn.waitForBytes(expected.length);
      expect(conn.received.equals(expected)).toBe(true);
    } finally {
      conn.destroy();
    }
  });

  it('serves 1,000 concurrent connections each doing PING', async (ctx) => {
    const limit = spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim();
    // The test process and the server (which inherits this limit) each hold one fd per connection.
    const needed = 1000 + 200;
    if (limit !== 'unlimited' && Number(limit) < needed) {
      ctx.skip(`open-file limit (ulimit -n) is ${limit}, below the ${needed} this test needs; raise it with ulimit -n 4096`);
    }
    const conns: RawConnection[] = [];
    const checker = await Checker.open(server.port);
    try {
      // Connect in waves so the listen backlog never overflows (which would only add SYN retries).
      for (let wave = 0; wave < 5; wave++) {
        conns.push(...(await Promise.all(Array.from({ length: 200 }, () => RawConnection.open(server.port)))));
      }
      expect(conns.length).toBe(1000);
      // The kernel completes handshakes before the server accepts them: poll until it has all.
      let connected = 0;
      for (const deadline = Date.now() + 10_000; connected < 1001 && Date.now() < deadline; await delay(20)) {
        connected = Number(infoField(await checker.call('INFO', 'clients'), 'connected_clients'));
      }
      expect(connected).toBeGreaterThanOrEqual(1001);
      await Promise.all(conns.map((c, i) => c.write(i % 2 === 0 ? 'PING\r\n' : mbulk('PING', `c${i}`))));
      await Promise.all(conns.map((c, i) => c.waitForBytes(i % 2 === 0 ? 7 : bulkReply(Buffer.from(`c${i}`)).length)));
      const expectedFor = (i: number): string => (i % 2 === 0 ? '+PONG\r\n' : bulkReply(Buffer.from(`c${i}`)).toString('latin1'));
      const wrong = conns.flatMap((c, i) => (c.text() === expectedFor(i) ? [] : [[i, c.text()]]));
      expect(wrong).toEqual([]);
    } finally {
      for (const c of conns) c.destroy();
      checker.close();
    }
  });
});

describe('binary safety', () => {
  it('echoes every byte value, in one argument and as inline \\xHH escapes', async () => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const { text, conn } = await exchange(server.port, mbulk('ECHO', all), bulkReply(all).toString('latin1'));
    conn.destroy();
    expect(Buffer.from(text, 'latin1').equals(bulkReply(all))).toBe(true);
    const escaped = 'ECHO "' + [...all].map((b) => `\\x${b.toString(16).padStart(2, '0')}`).join('') + '"\r\n';
    const inline = await exchange(server.port, escaped, bulkReply(all).toString('latin1'));
    inline.conn.destroy();
    expect(Buffer.from(inline.text, 'latin1').equals(bulkReply(all))).toBe(true);
  });

  it('echoes random binary values of many sizes', async () => {
    const values = [0, 1, 2, 3, 100, 1000, 16 * 1024, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 200_000].map((n, i) => randomBytes(n, 1000 + i));
    const expected = Buffer.concat(values.map(bulkReply));
    const { text, conn } = await exchange(server.port, Buffer.concat(values.map((v) => mbulk('ECHO', v))), expected.toString('latin1'));
    conn.destroy();
    expect(Buffer.from(text, 'latin1').equals(expected)).toBe(true);
  });

  it('keeps binary keys exact', async () => {
    const checker = await Checker.open(server.port);
    try {
      const key = Buffer.concat([Buffer.from('bin:'), Buffer.from(Array.from({ length: 256 }, (_, i) => 255 - i))]);
      const reply = (await checker.call('CL.THROTTLE', key, '5', '10', '60')) as number[];
      expect(reply.slice(0, 3)).toEqual([0, 6, 5]);
      expect(await checker.call('EXISTS', key)).toBe(1);
      expect(await checker.call('TYPE', key)).toBe('gcra');
      // A key differing in one byte is another key.
      const other = Buffer.from(key);
      other[other.length - 1] ^= 1;
      expect(await checker.call('EXISTS', other)).toBe(0);
      const keys = (await checker.call('KEYS', 'bin:*')) as string[];
      expect(keys.map((k) => Buffer.from(k, 'latin1').toString('hex'))).toContain(key.toString('hex'));
      expect(await checker.call('DEL', key)).toBe(1);
    } finally {
      checker.close();
    }
  });
});

describe('error replies as Redis 7', () => {
  it('unknown command, wrong arity, unknown subcommand', async () => {
    await expectAnswerThenPong(server.port, 'foo a b\r\n', "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n");
    await expectAnswerThenPong(server.port, 'foo\r\n', "-ERR unknown command 'foo', with args beginning with: \r\n");
    await expectAnswerThenPong(server.port, mbulk(''), "-ERR unknown command '', with args beginning with: \r\n");
    await expectAnswerThenPong(server.port, 'ECHO\r\n', "-ERR wrong number of arguments for 'echo' command\r\n");
    await expectAnswerThenPong(server.port, 'PING x y z\r\n', "-ERR wrong number of arguments for 'ping' command\r\n");
    await expectAnswerThenPong(server.port, 'CLIENT x\r\n', "-ERR unknown subcommand 'x'. Try CLIENT HELP.\r\n");
    await expectAnswerThenPong(server.port, 'client setname\r\n', "-ERR wrong number of arguments for 'client|setname' command\r\n");
  });

  it('quotes at most 128 characters of the arguments of an unknown command', async () => {
    const long = 'x'.repeat(300);
    const expected = `-ERR unknown command 'foo', with args beginning with: '${'x'.repeat(128)}' \r\n`;
    await expectAnswerThenPong(server.port, `foo ${long} b\r\n`, expected);
  });

  it('never breaks framing with CR or LF in a quoted argument', async () => {
    await expectAnswerThenPong(server.port, mbulk('foo\r\nbar', 'a\nb'), "-ERR unknown command 'foo  bar', with args beginning with: 'a b' \r\n");
  });

  it('NOAUTH before AUTH, WRONGPASS for a bad password, then everything after AUTH', async () => {
    const auth: [string, string] = ['AUTH x\r\n', '+OK\r\n'];
    await expectAnswerThenPong(authServer.port, 'ECHO x\r\n', '-NOAUTH Authentication required.\r\n', auth);
    // Unknown commands are reported as unknown before the auth gate, as in Redis.
    await expectAnswerThenPong(authServer.port, 'foo\r\n', "-ERR unknown command 'foo', with args beginning with: \r\n", auth);
    const { text, conn } = await exchange(
      authServer.port,
      'AUTH nope\r\nAUTH x\r\nPING\r\n',
      '-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+PONG\r\n',
    );
    conn.destroy();
    expect(text).toBe('-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+PONG\r\n');
  });
});

describe('reply encoding', () => {
  it('RESP2 by default, RESP3 after HELLO 3, and back with HELLO 2', async () => {
    const checker = await Checker.open(server.port);
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write('CLIENT GETNAME\r\nCONFIG GET maxclients\r\nHELLO 3\r\nCLIENT GETNAME\r\nCONFIG GET maxclients\r\nINFO server\r\nHELLO 2\r\nCLIENT GETNAME\r\n');
      await conn.settle(30, 3000, 8);
      const { replies, rest } = parseReplies(conn.received);
      expect(rest).toBe(0);
      expect(replies.length).toBe(8);
      const text = conn.text();
      expect(text.startsWith('$-1\r\n*2\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n%7\r\n$6\r\nserver\r\n$8\r\ncellgate\r\n')).toBe(true);
      const hello3 = replies[2] as Map<Reply, Reply>;
      expect([...hello3.keys()]).toEqual(['server', 'version', 'proto', 'id', 'mode', 'role', 'modules']);
      expect(hello3.get('proto')).toBe(3);
      expect(text).toContain('\r\n_\r\n%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n=');
      expect(String(replies[5]).startsWith('txt:# Server\r\n')).toBe(true);
      expect(text.endsWith('$-1\r\n')).toBe(true);
    } finally {
      conn.destroy();
      checker.close();
    }
  });
});

describe('fuzz', () => {
  it('survives ~300 random frames; other connections and keys are unaffected', async () => {
    const checker = await Checker.open(server.port);
    try {
      const anchor = 'fuzz:anchor';
      expect(((await checker.call('CL.THROTTLE', anchor, '5', '1', '86400')) as number[])[0]).toBe(0);
      let protocolErrors = 0;
      await fc.assert(
        fc.asyncProperty(frameWithSplits, async ([buf, cuts]) => {
          const conn = await RawConnection.open(server.port);
          try {
            await conn.writeInPieces(buf, cuts);
            await conn.settle();
            // Whatever came back is whole RESP replies; a protocol error is only ever the last one,
            // and a closed connection always ends with one.
            const { replies, rest } = parseReplies(conn.received);
            expect(rest).toBe(0);
            const protoIdx = replies.findIndex((r) => typeof r === 'object' && r !== null && 'error' in r && r.error.startsWith('ERR Protocol error: '));
            if (protoIdx !== -1) {
              protocolErrors++;
              expect(protoIdx).toBe(replies.length - 1);
              await conn.waitForEnd();
            }
            if (conn.ended) expect(protoIdx).toBe(replies.length - 1);
          } finally {
            conn.destroy();
          }
          expect(await checker.call('PING')).toBe('PONG');
          expect(await checker.call('EXISTS', anchor)).toBe(1);
        }),
        { numRuns: 300, seed: 20261130, endOnFailure: true },
      );
      // The generator does reach the error paths (not only well-formed frames).
      expect(protocolErrors).toBeGreaterThan(50);
      expect(processAlive(server)).toBe(true);
    } finally {
      checker.close();
    }
  });
});
