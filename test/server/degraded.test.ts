/**
 * Every degraded mode shows in INFO (`degraded:`), the metrics (`cellgate_degraded{mode}`), /readyz
 * and the log (a line on entering and one on leaving), from one list (src/server/degraded.ts):
 * the backend answered by policy (a backend URL to a closed port), the rate limit service without a
 * configuration (rls-force-start with a file that does not load), a failing background save (the
 * snapshot's name taken by a non-empty directory), and the journal that cannot write (RLIMIT_FSIZE
 * lowered under the running server with prlimit: EFBIG for any user on any filesystem; a read-only
 * folder would not stop root, which these tests run as in the CI container).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';
import { infoField } from '../helpers/raw.js';
import { startOn, tempDirsForFile, waitForBgsave } from '../persistence/helpers.js';
import { waitFor } from '../helpers/wait.js';
import { startRls } from '../rls/helpers.js';

const newDir = tempDirsForFile();
const MODES = ['backend_unavailable', 'rls_no_config', 'journal_not_writing', 'snapshot_failing'];

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

/** The cellgate_degraded gauges of a scrape, by mode. */
async function gauges(metricsPort: number): Promise<Record<string, number>> {
  const text = (await get(metricsPort, '/metrics')).body;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^cellgate_degraded\{mode="(\w+)"\} (\d+)$/gm)) out[m[1]] = Number(m[2]);
  return out;
}

function expected(on: string[]): Record<string, number> {
  return Object.fromEntries(MODES.map((m) => [m, on.includes(m) ? 1 : 0]));
}

function logged(s: RunningServer, text: string): boolean {
  return s.logs.some((l) => l.includes(text));
}

describe('degraded modes', () => {
  it('none: INFO degraded is empty, every gauge 0, /readyz plain', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      expect(infoField(await r.info('degraded'), 'degraded')).toBe('');
      expect(await gauges(metricsPort)).toEqual(expected([]));
      expect(await get(metricsPort, '/readyz')).toEqual({ status: 200, body: 'ready\n' });
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('backend_unavailable: a backend on a closed port, calls answered by backend-unavailable local', async () => {
    const metricsPort = await freePort();
    const closed = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort), '--backend', `redis://127.0.0.1:${closed}`, '--backend-unavailable', 'local'] });
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      await waitFor(async () => infoField(await r.info('degraded'), 'degraded') === 'backend_unavailable', 'INFO degraded:backend_unavailable');
      expect(await gauges(metricsPort)).toEqual(expected(['backend_unavailable']));
      // Never reached since the start: not ready (whatever the policy), and the mode is shown too.
      const ready = await get(metricsPort, '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body).toMatch(/^not ready: .* \(degraded: backend_unavailable\)\n$/);
      await waitFor(() => logged(s, 'degraded mode entered: backend_unavailable: backend '), 'the log line');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('rls_no_config: rls-force-start serving without a configuration that loads', async () => {
    const rls = await startRls({ 'd.yaml': 'domain: d\ndescriptors: [ {' }, ['--rls-force-start', 'yes']);
    try {
      expect(infoField(await rls.redis.info('degraded'), 'degraded')).toBe('rls_no_config');
      expect(await gauges(rls.metricsPort)).toEqual(expected(['rls_no_config']));
      expect(await get(rls.metricsPort, '/readyz')).toEqual({ status: 200, body: 'ready (degraded: rls_no_config)\n' });
      await waitFor(() => logged(rls.server, 'degraded mode entered: rls_no_config'), 'the log line');
      // A configuration that loads ends the mode, and the log says so.
      rls.write('d.yaml', 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n');
      await waitFor(async () => infoField(await rls.redis.info('degraded'), 'degraded') === '', 'the configuration to load');
      await waitFor(() => logged(rls.server, 'degraded mode left: rls_no_config'), 'the log line on leaving');
      expect(await gauges(rls.metricsPort)).toEqual(expected([]));
    } finally {
      await rls.stop();
    }
  }, 60_000);

  it('snapshot_failing: a failed background save, then one that succeeds', async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--metrics-port', String(metricsPort)]);
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      mkdirSync(join(dir, 'blocked.snap', 'x'), { recursive: true });
      await r.config('SET', 'dbfilename', 'blocked.snap');
      await r.call('CL.THROTTLE', 'a', 5, 10, 60);
      expect(await r.bgsave()).toBe('Background saving started');
      expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('err');
      expect(infoField(await r.info('degraded'), 'degraded')).toBe('snapshot_failing');
      expect(await gauges(metricsPort)).toEqual(expected(['snapshot_failing']));
      expect((await get(metricsPort, '/readyz')).body).toMatch(/^not ready: .* \(degraded: snapshot_failing\)\n$/);
      await waitFor(() => logged(s, 'degraded mode entered: snapshot_failing'), 'the log line');
      await r.config('SET', 'dbfilename', 'cellgate.snap');
      expect(await r.bgsave()).toBe('Background saving started');
      expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('ok');
      expect(infoField(await r.info('degraded'), 'degraded')).toBe('');
      await waitFor(() => logged(s, 'degraded mode left: snapshot_failing'), 'the log line on leaving');
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  }, 60_000);

  it('journal_not_writing: appendonly yes and a file size limit the journal runs into', async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--metrics-port', String(metricsPort)]);
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      const limited = spawnSync('prlimit', ['--pid', String(s.proc.pid), '--fsize=16384:unlimited'], { encoding: 'utf8' });
      expect(limited.status).toBe(0);
      let i = 0;
      for (; i < 5000 && infoField(await r.info('persistence'), 'aof_last_write_status') === 'ok'; i++) await r.call('CL.THROTTLE', `key-number-${i}`, 100, 1, 3600, 3);
      expect(i).toBeLessThan(5000);
      expect(infoField(await r.info('degraded'), 'degraded')).toBe('journal_not_writing');
      expect(await gauges(metricsPort)).toEqual(expected(['journal_not_writing']));
      expect((await get(metricsPort, '/readyz')).body).toMatch(/^not ready: the journal cannot be written .* \(degraded: journal_not_writing\)\n$/);
      await waitFor(() => logged(s, 'degraded mode entered: journal_not_writing: the journal cannot be written'), 'the log line');
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  }, 60_000);
});
