/**
 * The warm-up at start (src/server/warmup.ts): limiter calls through the real path on a scratch
 * server before the port opens. It must leave nothing behind on the real server, and the counters
 * that cache their stats object (the limiter counters) must count into the real server's stats
 * afterwards, not into the scratch server's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { runToExit } from '../helpers/replies.js';
import { startServer, type RunningServer } from '../helpers/server.js';

function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

describe('warm-up at start', () => {
  let server: RunningServer;
  let redis: Redis;
  beforeAll(async () => {
    server = await startServer({ args: ['--warmup', 'yes', '--loglevel', 'verbose'] });
    redis = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    await redis.connect();
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('runs before the port opens (CONFIG GET warmup, the verbose log line before "listening")', async () => {
    expect(await redis.config('GET', 'warmup')).toEqual(['warmup', 'yes']);
    const warm = server.logs.findIndex((l) => l.includes('warm-up done in'));
    const listening = server.logs.findIndex((l) => l.includes('listening on port'));
    expect(warm).toBeGreaterThanOrEqual(0);
    expect(warm).toBeLessThan(listening);
  });

  it('leaves no keys, stats, slow log entries, latency histograms or connections behind', async () => {
    expect(await redis.dbsize()).toBe(0);
    expect(await redis.call('SCAN', '0', 'MATCH', 'warmup:*', 'COUNT', '1000')).toEqual(['0', []]);
    const info = (await redis.info('everything')) as string;
    // This test's own connection (and redis-ready checks, if any) only.
    expect(Number(field(info, 'total_connections_received'))).toBe(1);
    expect(field(info, 'connected_clients')).toBe('1');
    expect(field(info, 'keyspace_hits')).toBe('0');
    expect(field(info, 'keyspace_misses')).toBe('0');
    expect(field(info, 'rdb_changes_since_last_save')).toBe('0');
    expect(field(info, 'total_error_replies')).toBe('0');
    expect(info).not.toMatch(/^cmdstat_(cl\.throttle|gcra|rl\.|ping)/m);
    expect(info).not.toMatch(/^latency_percentiles_usec_(cl\.throttle|gcra|rl\.)/m);
    expect(info).not.toMatch(/^limiter_/m);
    expect(info).not.toMatch(/^db0:/m);
    expect(await redis.call('SLOWLOG', 'LEN')).toBe(0);
    // Client ids: this connection is the first one the real server has seen.
    expect(await redis.call('CLIENT', 'ID')).toBe(1);
  });

  it('the first calls after it are counted once each, in the real server stats', async () => {
    await redis.call('CL.THROTTLE', 'k1', '100', '1000', '60', '1');
    await redis.call('CL.THROTTLE', 'k1', '0', '1', '3600', '5'); // more than the limit: refused
    await redis.call('RL.TOKENBUCKET', 'k2', '10', '1000');
    await redis.call('RL.ALL', '2', 'k3', 'TOKENBUCKET', '10', '1000', 'k4', 'FIXEDWINDOW', '10', '1000');
    const info = (await redis.info('everything')) as string;
    expect(field(info, 'limiter_cl.throttle')).toBe('allowed=1,limited=1');
    expect(field(info, 'limiter_rl.tokenbucket')).toBe('allowed=1,limited=0');
    expect(field(info, 'limiter_rl.all')).toBe('allowed=1,limited=0');
    expect(field(info, 'cmdstat_cl.throttle')).toMatch(/^calls=2,/);
    expect(await redis.dbsize()).toBe(4);
  });
});

describe('warm-up of a server that journals (appendonly yes)', () => {
  it('runs the journal encoder on the scratch server and writes none of its records: the journal holds the real calls only', async () => {
    const server = await startServer({ args: ['--warmup', 'yes', '--loglevel', 'verbose', '--appendonly', 'yes', '--appendfsync', 'always'] });
    const redis = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      await redis.connect();
      const line = server.logs.find((l) => l.includes('warm-up done in'));
      const encoded = /\((\d+) journal records encoded, none written\)/.exec(line ?? '');
      expect(encoded, line).not.toBe(null);
      // Every limiter write of the warm-up's rounds went through the recorder (thousands of keys).
      expect(Number(encoded![1])).toBeGreaterThan(1000);
      const aofDir = join(server.dir, 'appendonlydir');
      const before = runToExit(['check', aofDir]);
      expect(before.status, before.stderr).toBe(0);
      expect(before.stdout).toMatch(/^records: 0$/m);
      expect(before.stdout).toMatch(/^keys: 0$/m);
      // One token per hour: the key outlives the test (check loads it with the current time).
      await redis.call('CL.THROTTLE', 'k1', '10', '1', '3600');
      await redis.call('RL.TOKENBUCKET', 'k2', '10', '1000');
      await redis.call('DEL', 'k2');
      // appendfsync always: the records are on disk before the replies leave.
      const after = runToExit(['check', aofDir]);
      expect(after.status, after.stderr).toBe(0);
      expect(after.stdout).toMatch(/^records: 3$/m);
      expect(after.stdout).toMatch(/^keys: 1$/m);
      expect(await redis.dbsize()).toBe(1);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});

describe('warm-up off', () => {
  it('--warmup no starts without it (no log line), and limiters count the same', async () => {
    const server = await startServer({ args: ['--warmup', 'no', '--loglevel', 'verbose'] });
    const redis = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      await redis.connect();
      expect(server.logs.some((l) => l.includes('warm-up done in'))).toBe(false);
      await redis.call('CL.THROTTLE', 'k1', '100', '1000', '60', '1');
      expect(field((await redis.info('limiter')) as string, 'limiter_cl.throttle')).toBe('allowed=1,limited=0');
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});
