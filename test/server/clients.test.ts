/**
 * Real clients work unchanged against cellgate: ioredis (RESP3 and RESP2), node-redis 5 (RESP2 and
 * RESP3), Python's redis-py, redis-cli (one-shot, -3, --pipe) and redis-benchmark. Each one does its
 * own handshake (HELLO, CLIENT SETNAME / SETINFO, the INFO ready check) and then runs CL.THROTTLE.
 *
 * Needs the Debian packages redis-tools (redis-cli, redis-benchmark) and python3-redis (for
 * /usr/bin/python3); `sh scripts/install-test-deps.sh` installs them.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { startServer, type RunningServer } from '../helpers/server.js';

let server: RunningServer;
/** A plain RESP2 connection for setup and checks. */
let admin: Redis;
const T0 = '1800000000000'; // the frozen debug clock (ms): replies below do not depend on timing

/** CL.THROTTLE k 5 10 60 on a fresh key, then again: 6 = limit, then remaining 5 and 4, reset 6 s and 12 s. */
const FIRST = [0, 6, 5, -1, 6];
const SECOND = [0, 6, 4, -1, 12];

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command with a time limit, feeding `input` on stdin; never throws on a non-zero exit. */
function run(cmd: string, args: string[], input?: string | Buffer, timeoutMs = 20_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${cmd}: ${e.message} (install the Debian package redis-tools: sh scripts/install-test-deps.sh)`));
    });
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout: Buffer.concat(out).toString('latin1'), stderr: Buffer.concat(err).toString('utf8') });
    });
    child.stdin.on('error', () => {
      /* the child may exit before reading everything; its status tells */
    });
    child.stdin.end(input ?? '');
  });
}

function mbulk(...args: (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = typeof a === 'string' ? Buffer.from(a, 'latin1') : a;
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

/** The CLIENT LIST line of the client named `name`. */
async function clientLine(name: string): Promise<string> {
  const list = (await admin.call('CLIENT', 'LIST')) as string;
  const line = list.split('\n').find((l) => l.includes(` name=${name} `));
  if (line === undefined) throw new Error(`no client named ${name} in:\n${list}`);
  return line;
}

async function commandCalls(command: string): Promise<number> {
  const stats = (await admin.call('INFO', 'commandstats')) as string;
  const m = new RegExp(`^cmdstat_${command.replace('|', '\\|')}:calls=(\\d+),`, 'm').exec(stats);
  return m ? Number(m[1]) : 0;
}

beforeAll(async () => {
  server = await startServer();
  admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, connectionName: 'admin' });
  await admin.connect();
});

afterAll(async () => {
  admin?.disconnect();
  const alive = server !== undefined && server.proc.exitCode === null && server.proc.signalCode === null;
  await server?.stop();
  expect(alive).toBe(true);
});

beforeEach(async () => {
  await admin.flushall();
  await admin.call('DEBUG', 'CLOCK', 'SET', T0);
});

describe('ioredis', () => {
  it.each([
    ['RESP3 (the default: HELLO 3)', undefined, 3],
    ['RESP2 (protocol: 2)', 2 as const, 2],
  ])('%s: handshake, INFO ready check, CL.THROTTLE, pipeline, CLIENT SETNAME', async (_label, protocol, resp) => {
    const infoCallsBefore = await commandCalls('info');
    const name = `ioredis-${resp}`;
    const client = new Redis({
      port: server.port,
      host: '127.0.0.1',
      lazyConnect: true,
      connectionName: name,
      retryStrategy: () => null,
      ...(protocol === undefined ? {} : { protocol }),
    });
    try {
      await client.connect();
      expect(client.status).toBe('ready');
      // The ready check is an INFO; the handshake set the name, the protocol and the library.
      expect(await commandCalls('info')).toBeGreaterThan(infoCallsBefore);
      const line = await clientLine(name);
      expect(line).toContain(` resp=${resp} `);
      expect(line).toMatch(/ lib-name=ioredis lib-ver=\S+/);

      const key = `io${resp}:k`;
      expect(await client.call('CL.THROTTLE', key, '5', '10', '60')).toEqual(FIRST);
      expect(await client.call('CL.THROTTLE', key, 5, 10, 60)).toEqual(SECOND);

      const results = await client.pipeline()
        .call('CL.THROTTLE', `${key}:p`, '5', '10', '60')
        .call('CL.THROTTLE', `${key}:p`, '5', '10', '60')
        .ping()
        .echo('hello')
        .call('TYPE', key)
        .exec();
      expect(results).toEqual([[null, FIRST], [null, SECOND], [null, 'PONG'], [null, 'hello'], [null, 'gcra']]);

      expect(await client.client('SETNAME', `${name}-renamed`)).toBe('OK');
      expect(await client.client('GETNAME')).toBe(`${name}-renamed`);
      await clientLine(`${name}-renamed`);

      const info = await client.info('server');
      expect(info).toMatch(/^# Server\r\n/);
      expect(info).toContain('redis_version:');

      // Errors reach the caller as rejected promises with the server's text.
      await expect(client.call('NOSUCHCOMMAND', 'a')).rejects.toThrow("ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'a' ");
      await expect(client.call('CL.THROTTLE', key, 'x', '10', '60')).rejects.toThrow(/^ERR /);
      expect(await client.ping()).toBe('PONG');
    } finally {
      client.disconnect();
    }
  });

  it('RESP3 with replyMapping resp3: maps arrive as objects', async () => {
    const client = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, replyMapping: 'resp3', retryStrategy: () => null });
    try {
      await client.connect();
      expect(await client.call('CONFIG', 'GET', 'maxclients')).toEqual({ maxclients: '10000' });
      const hello = (await client.call('HELLO', '3')) as Record<string, unknown>;
      expect(hello).toMatchObject({ server: 'cellgate', proto: 3, mode: 'standalone', role: 'master', modules: [] });
      expect(await client.call('CLIENT', 'GETNAME')).toBeNull();
      expect(await client.call('CL.THROTTLE', 'io:map', '5', '10', '60')).toEqual(FIRST);
    } finally {
      client.disconnect();
    }
  });
});

describe('node-redis 5', () => {
  it.each([
    ['RESP2 (default)', undefined, 2],
    ['RESP3 (HELLO 3 with SETNAME)', 3 as const, 3],
  ])('%s: connect, CLIENT SETINFO, sendCommand CL.THROTTLE', async (_label, RESP, resp) => {
    const name = `node-redis-${resp}`;
    const client = createClient({ url: `redis://127.0.0.1:${server.port}`, name, ...(RESP === undefined ? {} : { RESP }) });
    const errors: Error[] = [];
    client.on('error', (e: Error) => errors.push(e));
    try {
      await client.connect();
      const line = await clientLine(name);
      expect(line).toContain(` resp=${resp} `);
      expect(line).toMatch(/ lib-name=node-redis lib-ver=\S+/);
      expect(await client.ping()).toBe('PONG');
      const key = `nr${resp}:k`;
      expect(await client.sendCommand(['CL.THROTTLE', key, '5', '10', '60'])).toEqual(FIRST);
      // Commands issued together are pipelined on the one connection; replies come back in order.
      const replies = await Promise.all([
        client.sendCommand(['CL.THROTTLE', key, '5', '10', '60']),
        client.sendCommand(['ECHO', 'x']),
        client.sendCommand(['TYPE', key]),
        client.sendCommand(['EXISTS', key, 'nope']),
      ]);
      expect(replies).toEqual([SECOND, 'x', 'gcra', 1]);
      await expect(client.sendCommand(['NOSUCHCOMMAND'])).rejects.toThrow("ERR unknown command 'NOSUCHCOMMAND', with args beginning with: ");
      expect(errors).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

describe('redis-py (python3-redis)', () => {
  /** The interpreter the Debian package installs into (not a pyenv one), else python3 on PATH. */
  function python(): string {
    const candidates = ['/usr/bin/python3', 'python3'].filter((p) => !p.startsWith('/') || existsSync(p));
    for (const py of candidates) {
      const r = spawnSync(py, ['-c', 'import redis'], { encoding: 'utf8', timeout: 10_000 });
      if (r.status === 0) return py;
    }
    throw new Error(
      `no python3 can import redis (tried ${candidates.join(', ')}): install Debian's python3-redis ` +
        '(apt-get install python3-redis, or sh scripts/install-test-deps.sh)',
    );
  }

  it('PING, execute_command CL.THROTTLE, a non-transactional pipeline, binary ECHO', async () => {
    const script = [
      'import json, sys, redis',
      "r = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=5, client_name='redis-py')",
      'out = {}',
      "out['ping'] = r.ping()",
      "out['first'] = r.execute_command('CL.THROTTLE', 'py:k', 5, 10, 60)",
      "out['second'] = r.execute_command('CL.THROTTLE', 'py:k', '5', '10', '60')",
      'p = r.pipeline(transaction=False)',
      "p.execute_command('CL.THROTTLE', 'py:p', 5, 10, 60)",
      'p.ping()',
      "p.echo(b'\\x00\\xff\\r\\n')",
      "out['pipeline'] = [x.hex() if isinstance(x, bytes) else x for x in p.execute()]",
      "out['name'] = r.client_getname()",
      'try:',
      "    r.execute_command('NOSUCHCOMMAND')",
      'except redis.exceptions.ResponseError as e:',
      "    out['error'] = str(e)",
      'print(json.dumps(out))',
    ].join('\n');
    const r = await run(python(), ['-c', script, String(server.port)]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      ping: true,
      first: FIRST,
      second: SECOND,
      pipeline: [FIRST, true, '00ff0d0a'],
      name: 'redis-py',
      error: "unknown command 'NOSUCHCOMMAND', with args beginning with: ",
    });
  });
});

describe('redis-cli', () => {
  it('one-shot CL.THROTTLE prints the five integers', async () => {
    const first = await run('redis-cli', ['-p', String(server.port), 'CL.THROTTLE', 'cli:k', '5', '10', '60']);
    expect(first).toEqual({ status: 0, stdout: FIRST.join('\n') + '\n', stderr: '' });
    const second = await run('redis-cli', ['-p', String(server.port), 'CL.THROTTLE', 'cli:k', '5', '10', '60']);
    expect(second.stdout).toBe(SECOND.join('\n') + '\n');
  });

  it('-3 sends HELLO 3, then runs the command on the RESP3 connection', async () => {
    const info = await run('redis-cli', ['-3', '-p', String(server.port), 'CLIENT', 'INFO']);
    expect(info.status).toBe(0);
    expect(info.stdout).toContain(' resp=3 ');
    expect(info.stdout).toContain(' cmd=client|info ');
    const throttle = await run('redis-cli', ['-3', '-p', String(server.port), 'CL.THROTTLE', 'cli3:k', '5', '10', '60']);
    expect(throttle.stdout).toBe(FIRST.join('\n') + '\n');
    const hello = await run('redis-cli', ['-3', '-p', String(server.port), 'HELLO', '3']);
    // redis-cli prints a RESP3 map as "key value" lines.
    expect(hello.stdout).toMatch(/^server cellgate\nversion \S+\nproto 3\nid \d+\nmode standalone\nrole master\nmodules \n/);
  });

  it('--pipe: a few thousand commands, then its ECHO of random bytes; errors: 0', async () => {
    const n = 3000;
    const parts: Buffer[] = [];
    for (let i = 0; i < n; i++) {
      if (i % 3 === 0) parts.push(mbulk('CL.THROTTLE', `pipe:${i % 100}`, '5', '10', '60'));
      else if (i % 3 === 1) parts.push(mbulk('PING'));
      else parts.push(mbulk('ECHO', Buffer.from([i & 0xff, 0, 13, 10, (i >> 8) & 0xff])));
    }
    const r = await run('redis-cli', ['-p', String(server.port), '--pipe'], Buffer.concat(parts));
    expect(r.stdout).toContain('All data transferred. Waiting for the last reply...\n');
    expect(r.stdout).toContain('Last reply received from server.\n');
    expect(r.stdout).toContain(`errors: 0, replies: ${n}\n`);
    expect(r.status).toBe(0);
    // Each of the 100 keys got 10 calls with the clock frozen: the 6 of the burst were spent.
    expect(await admin.dbsize()).toBe(100);
    expect(((await admin.call('CL.THROTTLE', 'pipe:0', '5', '10', '60')) as number[]).slice(0, 3)).toEqual([1, 6, 0]);
  });

  it('--pipe counts error replies', async () => {
    const r = await run('redis-cli', ['-p', String(server.port), '--pipe'], Buffer.concat([mbulk('PING'), mbulk('NOSUCHCOMMAND')]));
    expect(r.stdout).toContain('errors: 1, replies: 2\n');
    expect(r.status).toBe(1);
  });
});

describe('redis-benchmark', () => {
  function rpsLine(stdout: string, test: string): string | undefined {
    // Quiet mode rewrites a progress line with \r; the result is the last segment of each line.
    return stdout
      .split(/[\r\n]/)
      .map((l) => l.trim())
      .find((l) => l.startsWith(`${test}: `) && /: [\d.]+ requests per second/.test(l));
  }

  it('-t ping runs PING_INLINE and PING_MBULK', async () => {
    const r = await run('redis-benchmark', ['-p', String(server.port), '-n', '2000', '-c', '5', '-q', '-t', 'ping'], undefined, 30_000);
    expect(r.status).toBe(0);
    expect(rpsLine(r.stdout, 'PING_INLINE')).toBeDefined();
    expect(rpsLine(r.stdout, 'PING_MBULK')).toBeDefined();
  });

  it('a custom CL.THROTTLE command with -r 1000 random keys', async () => {
    const cmd = 'CL.THROTTLE key:__rand_int__ 10 100 60';
    const r = await run('redis-benchmark', ['-p', String(server.port), '-n', '2000', '-c', '5', '-q', '-r', '1000', ...cmd.split(' ')], undefined, 30_000);
    expect(r.status).toBe(0);
    expect(rpsLine(r.stdout, cmd)).toBeDefined();
    // __rand_int__ became 12-digit key numbers below 1000; each is a limiter key now.
    const keys = (await admin.keys('key:*')).sort();
    expect(keys.length).toBeGreaterThan(100);
    expect(keys.length).toBeLessThanOrEqual(1000);
    expect(keys.every((k: string) => /^key:0{9}\d{3}$/.test(k))).toBe(true);
    expect(await admin.type(keys[0])).toBe('gcra');
  });
});
