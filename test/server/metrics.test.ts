/**
 * Prometheus metrics on `metrics-port`: the text exposition format, fed by the same counters as INFO;
 * the per-command latency histogram; the health endpoints /healthz and /readyz on the same port.
 */
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { freePort, startServer, MAIN } from '../helpers/server.js';
import { fillKeys, startOn, tempDirsForFile, waitFor, waitForBgsave } from '../persistence/helpers.js';
import { parseExposition } from '../gateway/prometheus.js';

const newDir = tempDirsForFile();

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

describe('metrics', () => {
  it('serves Prometheus text on /metrics with limiter decisions, keys and commands', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    const redis = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
      await redis.call('CL.THROTTLE', 'm', '0', '1', '60');
      await redis.call('CL.THROTTLE', 'm', '0', '1', '60');
      await redis.call('RL.FIXEDWINDOW', 'f', '5', '1000');
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
      const text = await res.text();
      expect(text).toContain('# TYPE cellgate_limiter_decisions_total counter\n');
      expect(text).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="allowed"} 1\n');
      expect(text).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="limited"} 1\n');
      expect(text).toContain('cellgate_keys{type="gcra"} 1\n');
      expect(text).toContain('cellgate_keys{type="fixedwindow"} 1\n');
      expect(text).toContain('cellgate_command_calls_total{command="cl.throttle"} 2\n');
      expect(text).toMatch(/\ncellgate_connected_clients 1\n/);
      expect(text).toMatch(/\ncellgate_memory_used_bytes \d+\n/);
      // One client connected: its memory account (at least the connection's own cost) and no eviction.
      expect(Number(/\ncellgate_clients_memory_bytes (\d+)\n/.exec(text)![1])).toBeGreaterThan(1000);
      expect(text).toMatch(/\ncellgate_evicted_clients_total 0\n/);
      // Every sample line is `name{labels} number` or `name number`.
      for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
        expect(line).toMatch(/^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[\d.e+]+$/);
      }
      expect((await fetch(`http://127.0.0.1:${metricsPort}/other`)).status).toBe(404);
    } finally {
      redis.disconnect();
      await s.stop();
    }
  });

  it('is off by default', async () => {
    const s = await startServer();
    try {
      expect(s.logs.join('\n')).not.toContain('Prometheus metrics on port');
    } finally {
      await s.stop();
    }
  });

  it('exposes cellgate_command_duration_seconds as a valid histogram per command: cumulative buckets, +Inf = _count = calls', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    const redis = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      for (let i = 0; i < 50; i++) await redis.call('CL.THROTTLE', `h${i % 5}`, '5', '5', '1');
      for (let i = 0; i < 7; i++) await redis.call('RL.FIXEDWINDOW', 't', '10', '1000');
      await redis.ping();
      const text = (await get(metricsPort, '/metrics')).body;
      const e = parseExposition(text);
      expect(e.types.get('cellgate_command_duration_seconds')).toBe('histogram');
      const calls = new Map(e.samples.filter((x) => x.name === 'cellgate_command_calls_total').map((x) => [x.labels.command, x.value]));
      const totals = new Map(e.samples.filter((x) => x.name === 'cellgate_command_duration_seconds_total').map((x) => [x.labels.command, x.value]));
      const commands = new Set(e.samples.filter((x) => x.name === 'cellgate_command_duration_seconds_count').map((x) => x.labels.command));
      expect([...commands]).toEqual(expect.arrayContaining(['cl.throttle', 'rl.fixedwindow', 'ping']));
      for (const command of commands) {
        const buckets = e.samples.filter((x) => x.name === 'cellgate_command_duration_seconds_bucket' && x.labels.command === command);
        const les = buckets.map((b) => (b.labels.le === '+Inf' ? Infinity : Number(b.labels.le)));
        expect(les.at(-1), command).toBe(Infinity);
        for (let i = 1; i < buckets.length; i++) {
          expect(les[i], `${command} le order`).toBeGreaterThan(les[i - 1]);
          expect(buckets[i].value, `${command} cumulative`).toBeGreaterThanOrEqual(buckets[i - 1].value);
        }
        const count = e.samples.find((x) => x.name === 'cellgate_command_duration_seconds_count' && x.labels.command === command)!.value;
        const sum = e.samples.find((x) => x.name === 'cellgate_command_duration_seconds_sum' && x.labels.command === command)!.value;
        expect(buckets.at(-1)!.value, command).toBe(count);
        expect(count, command).toBe(calls.get(command));
        expect(sum, command).toBeCloseTo(totals.get(command)!, 9);
        expect(sum, command).toBeGreaterThan(0);
      }
      expect(calls.get('cl.throttle')).toBe(50);
      expect(calls.get('rl.fixedwindow')).toBe(7);
      // CONFIG RESETSTAT empties the histograms with the other command counters.
      await redis.config('RESETSTAT');
      const after = parseExposition((await get(metricsPort, '/metrics')).body);
      expect(after.samples.filter((x) => x.name === 'cellgate_command_duration_seconds_count' && x.labels.command === 'cl.throttle')).toEqual([]);
    } finally {
      redis.disconnect();
      await s.stop();
    }
  });

  it('/healthz answers 200 ok; /readyz 200 ready; other paths 404', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    try {
      expect(await get(metricsPort, '/healthz')).toEqual({ status: 200, body: 'ok\n' });
      expect(await get(metricsPort, '/readyz')).toEqual({ status: 200, body: 'ready\n' });
      expect((await get(metricsPort, '/healthz/x')).status).toBe(404);
    } finally {
      await s.stop();
    }
  });

  it('/readyz answers 503 while the snapshot loads (healthz 200 meanwhile), then 200', async () => {
    const dir = newDir();
    const first = await startOn(dir);
    await fillKeys(first.port, 3000);
    expect(await first.stop('SIGTERM')).toBe(0);
    const metricsPort = await freePort();
    // 1 ms per key: the load lasts at least 3 s of real time, so the probes see it.
    const proc = spawn(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--log-format', 'json', '--dir', dir,
      '--key-load-delay', '1000', '--metrics-port', String(metricsPort)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
    try {
      const seen: string[] = [];
      let liveWhileLoading = 0;
      // On failure: what /readyz said last, and whether the process is still there.
      const what = () => `/readyz to answer 200 (last answers ${JSON.stringify(seen.slice(-3))}, exit ${proc.exitCode ?? proc.signalCode ?? 'none'}, stderr ${JSON.stringify(stderr.slice(-500))})`;
      await waitFor('/readyz to answer 200', async () => {
        if (proc.exitCode !== null) throw new Error(what());
        const r = await get(metricsPort, '/readyz').catch(() => null);
        if (r === null) return false;
        seen.push(`${r.status} ${r.body}`);
        // A probe may meet a kept-alive connection the server is closing (ECONNRESET on a loaded
        // machine): like the /readyz probe above, it is tried again at the next poll.
        if (r.status === 503 && (await get(metricsPort, '/healthz').catch(() => null))?.status === 200) liveWhileLoading++;
        return r.status === 200;
      }, 60_000).catch((e: Error) => {
        throw new Error(`${e.message}: ${what()}`);
      });
      expect(seen[0]).toBe('503 not ready: loading the snapshot\n');
      expect(seen.at(-1)).toBe('200 ready\n');
      expect(liveWhileLoading).toBeGreaterThanOrEqual(1);
    } finally {
      proc.kill('SIGKILL');
    }
  }, 90_000);

  it('/readyz answers 503 after a failed background save, 200 again once a save succeeds', async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--metrics-port', String(metricsPort)]);
    const r = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      // The rename onto the snapshot fails: a non-empty directory sits where the file must go.
      mkdirSync(join(dir, 'blocked.snap', 'x'), { recursive: true });
      await r.config('SET', 'dbfilename', 'blocked.snap');
      await r.call('CL.THROTTLE', 'a', 5, 10, 60);
      expect(await r.bgsave()).toBe('Background saving started');
      expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('err');
      const failed = await get(metricsPort, '/readyz');
      expect(failed.status).toBe(503);
      expect(failed.body).toBe('not ready: the last background save failed (INFO persistence rdb_last_bgsave_status:err) (degraded: snapshot_failing)\n');
      expect((await get(metricsPort, '/healthz')).status).toBe(200);
      await r.config('SET', 'dbfilename', 'cellgate.snap');
      expect(await r.bgsave()).toBe('Background saving started');
      expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('ok');
      expect(await get(metricsPort, '/readyz')).toEqual({ status: 200, body: 'ready\n' });
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  });
});
