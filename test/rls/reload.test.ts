/**
 * The configuration reloads: on a file change (watched directory) and on SIGHUP; a bad file keeps
 * the configuration in force, is logged with its file and field, and counted; /readyz and the gRPC
 * health check say not ready until a configuration loaded; reloads during traffic drop nothing.
 */
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { MAIN } from '../helpers/server.js';
import { counter, HealthClient, startRls, until, type Rls } from './helpers.js';

const limitOf = (n: number) => `domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: ${n} }\n`;
const BAD = 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1, requestsperunit: 2 }\n';
const one = (value: string) => [{ entries: [{ key: 'k', value }] }];

const started: Rls[] = [];
afterAll(async () => {
  for (const r of started) await r.stop();
});

async function loads(rls: Rls): Promise<{ ok: number; error: number }> {
  const m = await rls.metrics();
  return { ok: counter(m, 'ratelimit_service_config_load_success'), error: counter(m, 'ratelimit_service_config_load_error') };
}

describe('reload', () => {
  it('a changed file applies; a bad one keeps the old configuration, logged with file and field, counted; SIGHUP reloads', async () => {
    const rls = await startRls({ 'app.yaml': limitOf(5) });
    started.push(rls);
    expect((await rls.should('app', one('a'))).statuses[0].current_limit!.requests_per_unit).toBe(5);
    rls.write('app.yaml', limitOf(1));
    await until(async () => (await loads(rls)).ok === 2, 'the reload after the change');
    expect((await rls.should('app', one('b'))).statuses[0].current_limit!.requests_per_unit).toBe(1);

    rls.write('app.yaml', BAD);
    await until(async () => (await loads(rls)).error >= 1, 'the refused reload');
    // The log line comes on another channel than the counter: waited for on its own.
    await until(() => rls.server.logs.some((l) => l.includes('rls-config not loaded')), 'the refusal logged');
    const line = rls.server.logs.find((l) => l.includes('rls-config not loaded'))!;
    expect(line).toContain("app.yaml: config error, unknown key 'requestsperunit' (at descriptors[0].rate_limit.requestsperunit)");
    expect(line).toContain('the previous configuration stays in force');
    // Still the last good configuration.
    expect((await rls.should('app', one('c'))).statuses[0].current_limit!.requests_per_unit).toBe(1);
    expect((await fetch(`http://127.0.0.1:${rls.metricsPort}/readyz`)).status).toBe(200);

    rls.write('app.yaml', limitOf(7));
    await until(async () => (await loads(rls)).ok === 3, 'the reload of the fixed file');
    const before = (await loads(rls)).ok;
    rls.server.proc.kill('SIGHUP');
    await until(async () => (await loads(rls)).ok === before + 1, 'the SIGHUP reload');
    expect(rls.server.logs.some((l) => l.includes('rls-config loaded (SIGHUP)'))).toBe(true);
    expect((await rls.should('app', one('d'))).statuses[0].current_limit!.requests_per_unit).toBe(7);
  });

  it('not ready until a configuration loaded: /readyz 503, health NOT_SERVING, calls refused; then ready', async () => {
    const rls = await startRls({ 'app.yaml': BAD });
    started.push(rls);
    const ready = await fetch(`http://127.0.0.1:${rls.metricsPort}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.text()).toContain('no rate limit configuration loaded');
    const e = await rls.shouldFail({ domain: 'app', descriptors: one('a') });
    expect(e.code).toBe(grpc.status.UNKNOWN);
    expect(e.details).toBe('no rate limit configuration loaded');
    const h = new HealthClient(`127.0.0.1:${rls.rlsPort}`, grpc.credentials.createInsecure());
    const check = () => new Promise<string>((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (h as any).Check({ service: '' }, (err: Error | null, r: { status: string }) => (err ? reject(err) : resolve(r.status)));
    });
    expect(await check()).toBe('NOT_SERVING');
    rls.write('app.yaml', limitOf(3));
    await until(async () => (await fetch(`http://127.0.0.1:${rls.metricsPort}/readyz`)).status === 200, 'ready');
    expect(await check()).toBe('SERVING');
    h.close();
    expect((await rls.should('app', one('a'))).statuses[0].limit_remaining).toBe(2);
  });

  it('reloads during traffic: every request answered, none dropped, the bad ones refused', async () => {
    const rls = await startRls({ 'app.yaml': limitOf(1_000_000) });
    started.push(rls);
    let answered = 0;
    let failed = 0;
    let stop = false;
    const callers = Array.from({ length: 4 }, async (_, c) => {
      for (let i = 0; !stop; i++) {
        try {
          const r = await rls.should('app', one(`c${c}-${i % 50}`));
          if (r.overall_code === 'OK') answered++;
        } catch {
          failed++;
        }
      }
    });
    const ROUNDS = 20;
    for (let round = 0; round < ROUNDS; round++) {
      rls.write('app.yaml', round % 4 === 3 ? BAD : limitOf(1_000_000 - round));
      if (round % 5 === 4) rls.server.proc.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 30));
    }
    rls.write('app.yaml', limitOf(42));
    await until(async () => (await rls.should('app', one('final'))).statuses[0].current_limit!.requests_per_unit === 42, 'the last configuration');
    stop = true;
    await Promise.all(callers);
    const l = await loads(rls);
    console.log(`[attack] rls reload race: ${answered} requests answered, ${failed} failed, ${l.ok} loads, ${l.error} refused loads`);
    expect(failed).toBe(0);
    expect(answered).toBeGreaterThan(0);
    expect(l.ok).toBeGreaterThanOrEqual(2);
    expect(rls.server.proc.exitCode).toBeNull();
  });

  it('rls-port in use: the start stops, naming it', async () => {
    const holder = net.createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
    const port = (holder.address() as net.AddressInfo).port;
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-rls-start-'));
    const r = spawnSync(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--rls-port', String(port), '--rls-config', dir, '--warmup', 'no'], { encoding: 'utf8', timeout: 20_000 });
    holder.close();
    rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(1);
    expect(r.stdout + r.stderr).toContain(`rls-port: cannot listen on 127.0.0.1:${port}: EADDRINUSE`);
  });

  it('rls-port without rls-config: the start stops with one line', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-rls-start-'));
    const r = spawnSync(process.execPath, [MAIN, '--port', '0', '--dir', dir, '--rls-port', '18999', '--warmup', 'no'], { encoding: 'utf8', timeout: 20_000 });
    rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(1);
    expect(r.stdout + r.stderr).toContain('rls-port is set but rls-config is not');
  });
});
