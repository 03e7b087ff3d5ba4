/**
 * Client limits (docs/security.md): maxclients, idle timeout, client-query-buffer-limit, proto-max-bulk-len,
 * the argument cap, client-output-buffer-limit (hard and soft), CLIENT KILL in all its forms and
 * CLIENT LIST's fields, over raw sockets against real servers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, expectAnswerThenClose, infoField, processAlive } from '../helpers/raw.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

let server: RunningServer;
beforeAll(async () => {
  server = await startServer();
});
afterAll(async () => {
  const alive = processAlive(server);
  await server.stop();
  expect(alive).toBe(true);
});

/** A socket that never reads what the server sends (its replies pile up in kernel and server). */
function openNonReading(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' }, () => {
      socket.pause();
      resolve(socket);
    });
    socket.on('error', () => {});
    socket.once('error', reject);
  });
}

async function waitUntil(check: () => Promise<boolean> | boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

describe('maxclients', () => {
  it('answers -ERR max number of clients reached and closes; a freed slot is reusable', async () => {
    const s = await startServer({ args: ['--maxclients', '3'] });
    const held: Checker[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        held.push(await Checker.open(s.port));
        expect(await held[i].call('PING')).toBe('PONG');
      }
      const extra = await RawConnection.open(s.port);
      await extra.waitForEnd();
      expect(extra.text()).toBe('-ERR max number of clients reached\r\n');
      extra.destroy();
      expect(infoField(await held[0].call('INFO', 'stats'), 'rejected_connections')).toBe('1');
      held.pop()!.close();
      await waitUntil(async () => infoField(await held[0].call('INFO', 'clients'), 'connected_clients') === '2', 3000, 'the slot to be freed');
      const again = await Checker.open(s.port);
      expect(await again.call('PING')).toBe('PONG');
      again.close();
    } finally {
      for (const c of held) c.close();
      await s.stop();
    }
  });
});

describe('timeout', () => {
  it('closes a client idle for `timeout` seconds; an active one stays', async () => {
    // The idle timeout is real time (as Redis's: the debug clock is the limiters' time, not the
    // connections'), so the margins are wide: 2 s of timeout against a PING every 100 ms.
    const s = await startServer({ args: ['--timeout', '2', '--hz', '20'] });
    const idle = await RawConnection.open(s.port);
    const active = await Checker.open(s.port);
    try {
      const started = Date.now();
      const closed = idle.waitForClose(WAIT_LIMIT_MS);
      // The active client talks every 100 ms for longer than the timeout.
      while (!idle.closed) {
        expect(await active.call('PING')).toBe('PONG');
        await delay(100);
      }
      await closed;
      // Never before the timeout; how long after it depends on the machine (printed, not asserted).
      const after = Date.now() - started;
      console.log(`idle timeout 2 s: the idle client was closed after ${after} ms`);
      expect(after).toBeGreaterThanOrEqual(1900);
      await delay(100);
      expect(await active.call('PING')).toBe('PONG');
    } finally {
      idle.destroy();
      active.close();
      await s.stop();
    }
  });
});

describe('input limits', () => {
  it('closes a client past client-query-buffer-limit, without a reply, and counts it', async () => {
    const c = await Checker.open(server.port);
    try {
      expect(await c.call('CONFIG', 'SET', 'client-query-buffer-limit', '1mb')).toBe('OK');
      const before = Number(infoField(await c.call('INFO', 'stats'), 'client_query_buffer_limit_disconnections'));
      const conn = await RawConnection.open(server.port);
      await conn.write(`*2\r\n$4\r\nECHO\r\n$${4 * 1024 * 1024}\r\n`);
      for (let i = 0; i < 20 && !conn.closed; i++) await conn.write(Buffer.alloc(128 * 1024, 0x61));
      await conn.waitForClose();
      expect(conn.text()).toBe('');
      expect(Number(infoField(await c.call('INFO', 'stats'), 'client_query_buffer_limit_disconnections'))).toBe(before + 1);
      expect(server.logs.some((l) => l.includes('Closing client that reached max query buffer length'))).toBe(true);
    } finally {
      await c.call('CONFIG', 'SET', 'client-query-buffer-limit', '1gb');
      c.close();
    }
  });

  it('counts the arguments already parsed toward the query buffer (a million tiny arguments)', async () => {
    const c = await Checker.open(server.port);
    try {
      expect(await c.call('CONFIG', 'SET', 'client-query-buffer-limit', '1mb')).toBe('OK');
      const conn = await RawConnection.open(server.port);
      await conn.write('*1000000\r\n$6\r\nEXISTS\r\n');
      // 20,000 one-byte arguments are 140 KB on the wire, but over 1 MB of parsed arguments.
      await conn.write('$1\r\nx\r\n'.repeat(20_000));
      await conn.waitForClose();
      expect(conn.text()).toBe('');
    } finally {
      await c.call('CONFIG', 'SET', 'client-query-buffer-limit', '1gb');
      c.close();
    }
  });

  it('caps a command at 1,048,576 arguments (invalid multibulk length) and runs one that large', async () => {
    await expectAnswerThenClose(server.port, '*1048577\r\n', '-ERR Protocol error: invalid multibulk length\r\n');
    const n = 1024 * 1024;
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write(Buffer.concat([Buffer.from(`*${n}\r\n$6\r\nEXISTS\r\n`), Buffer.from('$1\r\nx\r\n'.repeat(n - 1))]));
      await conn.waitForBytes(4, 20_000);
      expect(conn.text()).toBe(':0\r\n');
    } finally {
      conn.destroy();
    }
  });

  it('refuses a $ header of 600 MiB with the default proto-max-bulk-len (512 MiB)', async () => {
    await expectAnswerThenClose(server.port, `*2\r\n$4\r\nECHO\r\n$${600 * 1024 * 1024}\r\n`, '-ERR Protocol error: invalid bulk length\r\n');
    // Exactly 512 MiB is a valid header: the server waits for the bytes.
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write(`*2\r\n$4\r\nECHO\r\n$${512 * 1024 * 1024}\r\nabc`);
      await delay(100);
      expect([conn.text(), conn.ended]).toEqual(['', false]);
    } finally {
      conn.destroy();
    }
  });
});

describe('client-output-buffer-limit', () => {
  // `COMMAND DOCS` is 14 bytes in and tens of KB out: a few thousand of them, unread, overflow any
  // kernel socket buffer, so the unsent output really piles up in the server.
  const flood = Buffer.from('COMMAND DOCS\r\n'.repeat(3000));

  it('shows Redis-style values in CONFIG GET and merges classes on CONFIG SET', async () => {
    const c = await Checker.open(server.port);
    try {
      expect(await c.call('CONFIG', 'GET', 'client-output-buffer-limit')).toEqual(['client-output-buffer-limit',
        'normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60']);
      expect(await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'pubsub 1mb 1kb 5')).toBe('OK');
      expect(await c.call('CONFIG', 'GET', 'client-output-buffer-limit')).toEqual(['client-output-buffer-limit',
        'normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 1048576 1024 5']);
      const bad = (await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'normal 1 2')) as { error: string };
      expect(bad.error).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'client-output-buffer-limit'\) - Wrong number of arguments/);
      expect(((await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'nope 1 2 3')) as { error: string }).error).toMatch(/Invalid client class/);
      expect(await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'pubsub 32mb 8mb 60')).toBe('OK');
    } finally {
      c.close();
    }
  });

  it('disconnects a client over the hard limit and logs it as Redis does', async () => {
    const s = await startServer({ args: ['--client-output-buffer-limit', 'normal 256kb 0 0'] });
    const c = await Checker.open(s.port);
    try {
      // A paused socket does not notice the close: watch from the server's side.
      const socket = await openNonReading(s.port);
      socket.write(flood);
      await waitUntil(async () => infoField(await c.call('INFO', 'stats'), 'client_output_buffer_limit_disconnections') === '1', 10_000, 'the disconnect');
      expect(await c.call('PING')).toBe('PONG');
      expect(infoField(await c.call('INFO', 'clients'), 'connected_clients')).toBe('1');
      socket.destroy();
      expect(s.logs.some((l) => /Client id=\d+ addr=127\.0\.0\.1:\d+ omem=\d+ scheduled to be closed ASAP for overcoming of output buffer limits\./.test(l))).toBe(true);
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('disconnects a client over the soft limit for soft-seconds', async () => {
    const s = await startServer({ args: ['--client-output-buffer-limit', 'normal 0 128kb 1', '--hz', '20'] });
    const c = await Checker.open(s.port);
    try {
      const socket = await openNonReading(s.port);
      const started = Date.now();
      socket.write(flood);
      await waitUntil(async () => infoField(await c.call('INFO', 'stats'), 'client_output_buffer_limit_disconnections') === '1', 10_000, 'the disconnect');
      // Over the soft limit is reached quickly; the disconnect waits for the 1 s of grace.
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      socket.destroy();
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('with the default limits, reads on for a non-reading client: every command runs, its replies wait in omem, others served', async () => {
    const c = await Checker.open(server.port);
    const socket = await openNonReading(server.port);
    try {
      // ~26 MB of replies: past the kernel's buffers, under the 64 MB soft and 256 MB hard limits.
      socket.write(Buffer.from('COMMAND DOCS\r\n'.repeat(1000)));
      // All of its input is read and run (qbuf=0, still reading: events=rw) while the replies wait,
      // as Redis does; a pipeline written whole before reading (redis-py's) then finishes.
      const flooder = async (): Promise<string | undefined> => String(await c.call('CLIENT', 'LIST')).split('\n').find((l) => l.includes('cmd=command|docs'));
      await waitUntil(async () => {
        const line = await flooder();
        return line !== undefined && / qbuf=0 /.test(line) && Number(/omem=(\d+)/.exec(line)![1]) > 4 * 1024 * 1024;
      }, 10_000, 'the flooder\'s input to be read and its replies to wait');
      expect(await flooder()).toMatch(/ events=rw /);
      expect(await c.call('PING')).toBe('PONG');
    } finally {
      socket.destroy();
      c.close();
    }
  });
});

describe('CLIENT KILL and CLIENT LIST', () => {
  async function named(name: string): Promise<{ checker: Checker; id: number; addr: string; conn: RawConnection }> {
    const conn = await RawConnection.open(server.port);
    const checker = Checker.wrap(conn);
    expect(await checker.call('CLIENT', 'SETNAME', name)).toBe('OK');
    const id = (await checker.call('CLIENT', 'ID')) as number;
    const info = String(await checker.call('CLIENT', 'INFO'));
    return { checker, id, addr: /addr=(\S+)/.exec(info)![1], conn };
  }

  it('CLIENT LIST has Redis 7.4 fields, in order', async () => {
    const c = await Checker.open(server.port);
    try {
      const list = String(await c.call('CLIENT', 'LIST', 'ID', String(await c.call('CLIENT', 'ID'))));
      const fields = list.trim().split(' ').map((kv) => kv.split('=')[0]);
      expect(fields).toEqual(['id', 'addr', 'laddr', 'fd', 'name', 'age', 'idle', 'flags', 'db', 'sub', 'psub', 'ssub', 'multi', 'watch', 'qbuf',
        'qbuf-free', 'argv-mem', 'multi-mem', 'rbs', 'rbp', 'obl', 'oll', 'omem', 'tot-mem', 'events', 'cmd', 'user', 'redir', 'resp',
        'lib-name', 'lib-ver']);
      expect(list).toMatch(/ events=r cmd=client\|list user=default /);
    } finally {
      c.close();
    }
  });

  it('kills by ID, ADDR, LADDR, USER, MAXAGE; SKIPME; the old ip:port form; errors as Redis', async () => {
    const me = await Checker.open(server.port);
    const a = await named('a');
    const b = await named('b');
    const d = await named('d');
    try {
      expect(await me.call('CLIENT', 'KILL', 'ID', String(a.id))).toBe(1);
      await a.conn.waitForClose();
      expect(await me.call('CLIENT', 'KILL', 'ID', String(a.id))).toBe(0);
      expect(await me.call('CLIENT', 'KILL', b.addr)).toBe('OK');
      await b.conn.waitForClose();
      expect(await me.call('CLIENT', 'KILL', b.addr)).toEqual({ error: 'ERR No such client' });
      expect(await me.call('CLIENT', 'KILL', 'ADDR', d.addr, 'ID', '999999')).toBe(0);
      expect(await me.call('CLIENT', 'KILL', 'ADDR', d.addr, 'USER', 'default', 'TYPE', 'normal')).toBe(1);
      await d.conn.waitForClose();
      expect(await me.call('CLIENT', 'KILL', 'TYPE', 'pubsub')).toBe(0);
      expect(await me.call('CLIENT', 'KILL', 'ID', '0')).toEqual({ error: 'ERR client-id should be greater than 0' });
      expect(await me.call('CLIENT', 'KILL', 'ID', 'x')).toEqual({ error: 'ERR client-id should be greater than 0' });
      expect(await me.call('CLIENT', 'KILL', 'TYPE', 'x')).toEqual({ error: "ERR Unknown client type 'x'" });
      expect(await me.call('CLIENT', 'KILL', 'USER', 'bob')).toEqual({ error: "ERR No such user 'bob'" });
      expect(await me.call('CLIENT', 'KILL', 'SKIPME', 'maybe')).toEqual({ error: 'ERR syntax error' });
      // Three arguments are the old form, whatever they say.
      expect(await me.call('CLIENT', 'KILL', 'ID')).toEqual({ error: 'ERR No such client' });
      expect(await me.call('CLIENT', 'KILL', 'ID', '1', 'SKIPME')).toEqual({ error: 'ERR syntax error' });
      expect(await me.call('CLIENT', 'KILL', 'MAXAGE', 'old')).toEqual({ error: 'ERR maxage is not an integer or out of range' });
      expect(await me.call('CLIENT', 'KILL', 'NOPE', 'x')).toEqual({ error: 'ERR syntax error' });
      // MAXAGE spares young clients; LADDR with SKIPME (default yes) spares the caller.
      const e = await named('e');
      expect(await me.call('CLIENT', 'KILL', 'MAXAGE', '1000', 'ID', String(e.id))).toBe(0);
      const laddr = /laddr=(\S+)/.exec(String(await me.call('CLIENT', 'INFO')))![1];
      const killed = (await me.call('CLIENT', 'KILL', 'LADDR', laddr)) as number;
      expect(killed).toBeGreaterThanOrEqual(1);
      await e.conn.waitForClose();
      expect(await me.call('PING')).toBe('PONG');
    } finally {
      for (const x of [a, b, d]) x.conn.destroy();
      me.close();
    }
  });

  it('kills the caller itself after the reply (SKIPME no, or its own address)', async () => {
    const x = await named('self1');
    expect(await x.checker.call('CLIENT', 'KILL', 'ID', String(x.id), 'SKIPME', 'no')).toBe(1);
    await x.conn.waitForClose();
    const y = await named('self2');
    expect(await y.checker.call('CLIENT', 'KILL', 'ID', String(y.id))).toBe(0);
    expect(await y.checker.call('CLIENT', 'KILL', y.addr)).toBe('OK');
    await y.conn.waitForClose();
  });
});
