/**
 * A real redis-server for a test file: a random free loopback port (retried on EADDRINUSE), its
 * own temporary directory, no persistence; stopped (and its directory removed) in afterAll, also
 * when a test failed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';

export const REDIS_SERVER = process.env.REDIS_SERVER ?? '/usr/bin/redis-server';

export interface RunningRedis {
  port: number;
  proc: ChildProcess;
  dir: string;
  stop(): Promise<void>;
}

async function tryStart(port: number, dir: string): Promise<RunningRedis | 'in-use'> {
  const proc = spawn(REDIS_SERVER, [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no',
    '--enable-debug-command', 'no', '--loglevel', 'warning',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout!.on('data', (c: Buffer) => { output += c.toString(); });
  proc.stderr!.on('data', (c: Buffer) => { output += c.toString(); });
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  // Ready when it answers PING; gone when it exits (a port in use ends it at once).
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (proc.exitCode !== null) {
      if (/in use|bind/i.test(output)) return 'in-use';
      throw new Error(`redis-server exited: ${output}`);
    }
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
      // Someone else's server on the port would answer too: check that it is this process.
      const info = await client.info('server');
      client.disconnect();
      if (new RegExp(`process_id:${proc.pid}\\b`).test(info)) break;
      await exited;
      return 'in-use';
    } catch {
      client.disconnect();
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`redis-server did not start: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port, proc, dir,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function startRedis(): Promise<RunningRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-redis-'));
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 40000);
    const r = await tryStart(port, dir);
    if (r !== 'in-use') return r;
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error('no free port for redis-server');
}

/** For a test file: one redis-server and one ioredis client (fields set once beforeAll ran). */
export function useRedis(): { server: RunningRedis; redis: Redis } {
  const env = {} as { server: RunningRedis; redis: Redis };
  beforeAll(async () => {
    env.server = await startRedis();
    env.redis = new Redis({ port: env.server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    await env.redis.connect();
  });
  afterAll(async () => {
    env.redis?.disconnect();
    await env.server?.stop();
  });
  return env;
}
