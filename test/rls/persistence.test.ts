/**
 * The service's counts live in the keyspace the RESP commands use: with the journal on
 * (appendfsync always) an answered ShouldRateLimit survives a kill -9, and a snapshot holds them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startRls, T0, type Rls } from './helpers.js';

const CONFIG = { 'app.yaml': 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n' };
const dataDir = mkdtempSync(join(tmpdir(), 'cellgate-rls-data-'));
const running: Rls[] = [];
afterAll(async () => {
  for (const r of running) await r.stop().catch(() => undefined);
  rmSync(dataDir, { recursive: true, force: true });
});

describe('persistence', () => {
  it('appendfsync always: the answered hits are on disk before the answers; a kill -9 forgets none', async () => {
    // hz 1: the journal's own cron writes once a second, so only the write before the answer can
    // have put the hits on disk by the time of the kill.
    const args = ['--dir', dataDir, '--appendonly', 'yes', '--appendfsync', 'always', '--hz', '1'];
    const first = await startRls(CONFIG, args);
    running.push(first);
    const d = [{ entries: [{ key: 'k', value: 'v' }] }];
    expect((await first.should('app', d)).statuses[0].limit_remaining).toBe(1);
    expect((await first.should('app', d)).statuses[0].limit_remaining).toBe(0);
    first.redis.disconnect();
    first.server.proc.kill('SIGKILL');
    await new Promise((r) => first.server.proc.once('exit', r));
    const second = await startRls(CONFIG, args);
    running.push(second);
    expect(await second.redis.exists(`app_k_v_${T0 / 1000}`)).toBe(1);
    expect((await second.should('app', d)).overall_code).toBe('OVER_LIMIT');
  });
});
