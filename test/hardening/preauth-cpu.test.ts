/**
 * Parsing before AUTH is bounded in CPU (docs/security.md), on a real server with a password,
 * over raw sockets:
 * - inline lines have the multibulk limits: at most 10 arguments of at most 16 KiB and a 64 KiB line;
 *   beyond, the multibulk path's protocol error and a close. A flood of lines of 32,000 one-letter
 *   arguments from several attackers is refused at the 11th argument of each line while an
 *   authenticated client PINGs: every PING is answered, every attacker closed;
 * - an unterminated inline line, a partial `*` header, a partial `$` header and a partial bulk, each
 *   sent a byte per write, end as they would sent whole (the parser's linear cost per byte is checked
 *   in test/protocol/request-parser.test.ts), and PINGs are answered throughout.
 * Round-trip times and the server's CPU time are printed as `[attack] ...` lines, not asserted.
 * Bounded in count; CELLGATE_SOAK=1 sends more lines and drips whole 64 KiB lines.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../helpers/server.js';
import { RawConnection, expectAnswerThenClose, expectAnswerThenPong, processAlive, startPingProbe, type PingStats } from '../helpers/raw.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const PASSWORD = 'pw';
const NOAUTH = '-NOAUTH Authentication required.\r\n';
const AUTH: [string, string] = [`AUTH ${PASSWORD}\r\n`, '+OK\r\n'];

let server: RunningServer;

beforeAll(async () => {
  server = await startServer({ args: ['--requirepass', PASSWORD] });
});

afterAll(async () => {
  const alive = server !== undefined && processAlive(server);
  await server?.stop();
  expect(alive).toBe(true);
});

/** The server's CPU time so far, in ms (utime + stime from /proc, 100 ticks a second). */
function serverCpuMs(): number {
  const fields = readFileSync(`/proc/${server.proc.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function pings(p: PingStats): string {
  return `PING p50 ${p.p50Ms.toFixed(2)} ms, p99 ${p.p99Ms.toFixed(2)} ms, max ${p.maxMs.toFixed(2)} ms over ${p.count} PINGs`;
}

const words = (n: number): string => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');

describe('inline requests before AUTH', () => {
  it('have the multibulk limits: 10 arguments of 16 KiB and a 64 KiB line; beyond, the same errors and a close', async () => {
    await expectAnswerThenPong(server.port, `PING ${words(9)}\r\n`, NOAUTH, AUTH);
    await expectAnswerThenClose(server.port, `PING ${words(10)}\r\n`, '-ERR Protocol error: unauthenticated multibulk length\r\n');
    await expectAnswerThenPong(server.port, `ECHO ${'x'.repeat(16 * 1024)}\r\n`, NOAUTH, AUTH);
    await expectAnswerThenClose(server.port, `ECHO ${'x'.repeat(16 * 1024 + 1)}\r\n`, '-ERR Protocol error: unauthenticated bulk length\r\n');
    await expectAnswerThenClose(server.port, `ECHO "${'x'.repeat(16 * 1024)}\\x78"\r\n`, '-ERR Protocol error: unauthenticated bulk length\r\n');
    // A whole line over 64 KiB (40 KiB of spaces: no argument is too big, nor too many).
    await expectAnswerThenClose(server.port, `PING${' '.repeat(40 * 1024)}${'y'.repeat(16 * 1024)} ${'z'.repeat(16 * 1024)}\r\n`, '-ERR Protocol error: too big inline request\r\n');
    // Once AUTH succeeds, later lines in the same packet have no such limits (as multibulk).
    const conn = await RawConnection.open(server.port);
    try {
      await conn.write(`AUTH ${PASSWORD}\r\nDEL ${words(2000)}\r\nECHO ${'x'.repeat(20_000)}\r\n`);
      const expected = `+OK\r\n:0\r\n$20000\r\n${'x'.repeat(20_000)}\r\n`;
      await conn.waitForBytes(expected.length);
      expect(conn.text()).toBe(expected);
      expect(conn.ended).toBe(false);
    } finally {
      conn.destroy();
    }
  });

  const ATTACKERS = 4;
  const LINES = SOAK ? 500 : 25;
  it(`${ATTACKERS} attackers × ${LINES} lines of 32,000 one-letter arguments: each refused at the 11th argument and closed; PINGs answered throughout`, async () => {
    const line = Buffer.from(`${'a '.repeat(32_000)}\r\n`);
    const refusal = '-ERR Protocol error: unauthenticated multibulk length\r\n';
    const probe = await startPingProbe(server.port, 2, PASSWORD);
    const cpuBefore = serverCpuMs();
    const started = Date.now();
    const answers: string[] = [];
    let closed = 0;
    await Promise.all(Array.from({ length: ATTACKERS }, async () => {
      for (let i = 0; i < LINES; i++) {
        const conn = await RawConnection.open(server.port);
        try {
          await conn.write(line);
          await conn.waitForEnd();
          answers.push(conn.text());
          if (conn.ended) closed++;
        } finally {
          conn.destroy();
        }
      }
    }));
    const seconds = (Date.now() - started) / 1000;
    const cpuMs = serverCpuMs() - cpuBefore;
    const stats = await probe.stop();
    const sent = ATTACKERS * LINES * line.length;
    console.log(`[attack] 32k-argument inline lines before AUTH: ${ATTACKERS} attackers × ${LINES} lines (${(sent / 1e6).toFixed(1)} MB in ${seconds.toFixed(1)} s, ` +
      `${(sent / 1e6 / seconds).toFixed(1)} MB/s), ${closed} refused and closed; server CPU ${cpuMs} ms; ${pings(stats)}`);
    expect(answers.length).toBe(ATTACKERS * LINES);
    expect(new Set(answers)).toEqual(new Set([refusal]));
    expect(closed).toBe(ATTACKERS * LINES);
    expect(stats.count).toBeGreaterThan(0);
  }, SOAK ? 300_000 : 60_000);
});

describe('requests sent a byte per write', () => {
  const DRIP = SOAK ? 64 * 1024 : 4096;
  it(`an unterminated inline line, a \`*\` header, a \`$\` header and a bulk, ${DRIP} bytes each a byte at a time: each ends as if sent whole; PINGs answered throughout`, async () => {
    const cases: { name: string; drip: string; rest: string; expected: string; closes: boolean }[] = [
      { name: 'inline line', drip: `ECHO ${'a'.repeat(DRIP - 5)}`, rest: 'a'.repeat(64 * 1024 - DRIP + 1), expected: '-ERR Protocol error: too big inline request\r\n', closes: true },
      { name: '* header', drip: `*${'1'.repeat(DRIP - 1)}`, rest: '1'.repeat(64 * 1024 - DRIP + 1), expected: '-ERR Protocol error: too big mbulk count string\r\n', closes: true },
      { name: '$ header', drip: `*1\r\n$${'1'.repeat(DRIP - 5)}`, rest: '1'.repeat(64 * 1024 - DRIP + 5), expected: '-ERR Protocol error: too big bulk count string\r\n', closes: true },
      // Before AUTH a bulk is at most 16 KiB: the drip stops there, the rest comes whole.
      { name: 'bulk', drip: `*2\r\n$4\r\nECHO\r\n$16384\r\n${'b'.repeat(Math.min(DRIP, 16_384) - 21)}`, rest: `${'b'.repeat(16_384 - Math.min(DRIP, 16_384) + 21)}\r\n`, expected: NOAUTH, closes: false },
    ];
    const probe = await startPingProbe(server.port, 2, PASSWORD);
    const cpuBefore = serverCpuMs();
    const results = await Promise.all(cases.map(async (c) => {
      const conn = await RawConnection.open(server.port);
      try {
        const bytes = Buffer.from(c.drip, 'latin1');
        for (let i = 0; i < bytes.length && !conn.ended; i++) {
          await conn.write(bytes.subarray(i, i + 1));
          await new Promise((resolve) => setImmediate(resolve)); // one segment per byte, as far as the kernel goes
        }
        const early = conn.text();
        await conn.write(c.rest);
        if (c.closes) await conn.waitForEnd();
        else await conn.waitForBytes(c.expected.length);
        return { name: c.name, early, text: conn.text(), ended: conn.ended };
      } finally {
        conn.destroy();
      }
    }));
    const cpuMs = serverCpuMs() - cpuBefore;
    const stats = await probe.stop();
    console.log(`[attack] ${cases.length} requests dripped ${DRIP} bytes each, one byte per write: server CPU ${cpuMs} ms; ${pings(stats)}`);
    expect(results).toEqual(cases.map((c) => ({ name: c.name, early: '', text: c.expected, ended: c.closes })));
    expect(stats.count).toBeGreaterThan(0);
  }, SOAK ? 300_000 : 60_000);
});
