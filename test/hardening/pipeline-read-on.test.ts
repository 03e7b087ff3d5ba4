/**
 * Pipelines that write every command before reading a reply (redis-py's pipeline(), as go-redis's
 * and Jedis's): the server reads on while replies wait, up to the client's output limit, so the
 * pipeline finishes instead of both sides waiting for each other; a client that never reads is closed
 * at `client-output-buffer-limit` (counted in INFO, logged as Redis does) and the others are served.
 *
 * Needs Debian's python3-redis (`sh scripts/install-test-deps.sh`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, infoField, mbulk } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

/** The interpreter the Debian package installs into (not a pyenv one), else python3 on PATH. */
function python(): string {
  const candidates = ['/usr/bin/python3', 'python3'].filter((p) => !p.startsWith('/') || existsSync(p));
  for (const py of candidates) {
    const r = spawnSync(py, ['-c', 'import redis'], { encoding: 'utf8', timeout: 10_000 });
    if (r.status === 0) return py;
  }
  throw new Error(`no python3 can import redis (tried ${candidates.join(', ')}): sh scripts/install-test-deps.sh`);
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // Bounded: a deadlocked pipeline is killed and the test fails on its status, not on vitest's timeout.
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

describe('a pipeline written whole before its replies are read', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('redis-py: 300,000 CL.THROTTLE in one pipeline() get every reply', async () => {
    const c = await Checker.open(server.port);
    try {
      // A frozen clock: each of the 1,000 keys gets 300 calls and exactly its burst (5 + 1) is allowed.
      expect(await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000')).toBe('OK');
    } finally {
      c.close();
    }
    const script = [
      'import json, sys, redis',
      // socket_timeout: a deadlock shows as an exception (exit status 1), not a hang.
      "r = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=60)",
      'p = r.pipeline(transaction=False)',
      'for i in range(300000):',
      "    p.execute_command('CL.THROTTLE', 'rp:%d' % (i % 1000), 5, 10, 60)",
      'res = p.execute()',
      'shape = sum(1 for x in res if isinstance(x, list) and len(x) == 5 and all(isinstance(v, int) for v in x))',
      'allowed = sum(1 for x in res if isinstance(x, list) and x[0] == 0)',
      "print(json.dumps({'replies': len(res), 'wellFormed': shape, 'allowed': allowed}))",
    ].join('\n');
    const r = await run(python(), ['-c', script, String(server.port)], 150_000);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ replies: 300_000, wellFormed: 300_000, allowed: 6_000 });
  }, 180_000);
});

describe('a client that never reads its replies', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer({ args: ['--client-output-buffer-limit', 'normal 4mb 0 0'] });
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('is read on past 1 MiB of waiting replies, closed at its hard limit, counted; others are served', async () => {
    const c = await Checker.open(server.port);
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ port: server.port, host: '127.0.0.1' }, () => resolve(s));
      s.once('error', reject);
    });
    socket.on('error', () => {});
    socket.pause(); // never reads: replies pile up in the kernel's buffers, then in the server's
    try {
      // 40,000 echoes of 1 KiB: ~40 MB of replies, far past what loopback's socket buffers take,
      // and past the 4 MB limit. A server that stopped reading at 1 MiB would never reach the limit.
      const payload = 'e'.repeat(1024);
      const parts: Buffer[] = [];
      for (let i = 0; i < 40_000; i++) parts.push(mbulk('ECHO', payload));
      socket.write(Buffer.concat(parts));
      await waitFor(async () => infoField(await c.call('INFO', 'stats'), 'client_output_buffer_limit_disconnections') === '1', 'the non-reading client to be closed at its limit');
      const line = server.logs.find((l) => l.includes('scheduled to be closed ASAP for overcoming of output buffer limits'));
      expect(line).toBeDefined();
      const omem = Number(/omem=(\d+)/.exec(line!)![1]);
      expect(omem).toBeGreaterThan(4 * 1024 * 1024);
      expect(await c.call('PING')).toBe('PONG');
      await waitFor(async () => infoField(await c.call('INFO', 'clients'), 'connected_clients') === '1', 'the closed client to leave');
      // Its output left the clients' memory with it: what remains is about one idle client's.
      expect(Number(infoField(await c.call('INFO', 'clients'), 'clients_total_memory'))).toBeLessThan(1024 * 1024);
    } finally {
      socket.destroy();
      c.close();
    }
  }, 60_000);
});
