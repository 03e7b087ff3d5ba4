/**
 * A hostile `rls-config` directory (docs/envoy.md, "Reloads"), against a real server: a FIFO, /dev/zero
 * behind a symlink, a symlink loop, a file over the bound, more files than the bound, a file that
 * grows while it is read, and a long read. Each is refused (or read) off the event loop: RESP PING,
 * a gRPC ShouldRateLimit (answered by the configuration in force) and the metrics port are answered
 * meanwhile, and the refusal is logged with its reason and counted by reason. The servers run under a
 * data-segment limit, so a server that read /dev/zero into memory would stop there, not take the
 * machine's memory.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { counter, startRls, until, type Rls } from './helpers.js';

const limitOf = (n: number, domain = 'app') => `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: ${n} }\n`;
const one = (value: string) => [{ entries: [{ key: 'k', value }] }];
/** At most 2 GB of data segment: far above what the server needs, far below a machine's memory. */
const BOUNDED = ['prlimit', '--data=2000000000', '--'];
/** How long an answer may take on a busy machine before the event loop counts as held. */
const ANSWER_MS = 15_000;

const started: Rls[] = [];
/** Undo what would hold a server on main (a FIFO waiting for a writer), then stop it even if its loop is held. */
const cleanups: (() => void)[] = [];
afterAll(async () => {
  for (const c of cleanups) c();
  for (const r of started) {
    await r.stop('SIGKILL');
    rmSync(`${r.configDir}-staging`, { recursive: true, force: true });
  }
});

async function start(): Promise<Rls> {
  const rls = await startRls({ 'app.yaml': limitOf(5) }, [], BOUNDED);
  started.push(rls);
  return rls;
}

function answered<T>(p: Promise<T>, what: string): Promise<T> {
  return Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} not answered within ${ANSWER_MS} ms: the event loop is held`)), ANSWER_MS)),
  ]);
}

async function metrics(rls: Rls): Promise<string> {
  return answered(rls.metrics(), 'GET /metrics');
}

/** RESP, gRPC and the metrics port answer, and the configuration in force is the first one (5 a minute). */
async function servedMeanwhile(rls: Rls): Promise<void> {
  expect(await answered(rls.redis.ping(), 'RESP PING')).toBe('PONG');
  const r = await answered(rls.should('app', one(`v${Math.random()}`)), 'gRPC ShouldRateLimit');
  expect(r.statuses[0].current_limit!.requests_per_unit).toBe(5);
  expect(await metrics(rls)).toContain('cellgate_rls_config_loaded 1');
}

/** Waits for a refused reload with `reason`, logged with `text` and what stays (`kept`). */
async function refused(rls: Rls, reason: string, text: string, kept = 'the previous configuration stays in force'): Promise<void> {
  const series = `cellgate_rls_config_refused_total{reason="${reason}"}`;
  await until(async () => counter(await metrics(rls), series) >= 1, `a refusal counted as ${reason}`, 30_000);
  // The log line comes on another channel than the counter: waited for on its own.
  const logged = (l: string): boolean => l.includes('rls-config not loaded') && l.includes(text);
  await until(() => rls.server.logs.some(logged), `the refusal logged with ${text}`);
  const line = rls.server.logs.find(logged);
  expect(line, `a log line naming ${text}`).toBeDefined();
  expect(line).toContain(kept);
  const m = await metrics(rls);
  expect(counter(m, 'cellgate_rls_config_last_load_ok')).toBe(0);
  expect(counter(m, 'ratelimit_service_config_load_error')).toBeGreaterThanOrEqual(1);
}

describe('a hostile rls-config directory', () => {
  it('a FIFO named *.yaml is refused at once (no writer awaited); RESP, gRPC and metrics answered; the configuration stays', async () => {
    const rls = await start();
    const fifo = join(rls.configDir, 'pipe.yaml');
    execFileSync('mkfifo', [fifo]);
    // On a server that opened it for reading and waits for a writer: open and close a writer, so it goes on.
    cleanups.push(() => {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // No reader holds it: nothing waits.
      }
    });
    await servedMeanwhile(rls);
    await refused(rls, 'not_regular', 'it is a FIFO, only regular files are read');
    await servedMeanwhile(rls);
  });

  it('/dev/zero behind a symlink is refused as a device, not read: memory stays small', async () => {
    const rls = await start();
    symlinkSync('/dev/zero', join(rls.configDir, 'zero.yaml'));
    await servedMeanwhile(rls);
    await refused(rls, 'not_regular', 'it is a character device, only regular files are read');
    // Nothing was read into memory: the resident set is that of a small server.
    expect(counter(await metrics(rls), 'cellgate_memory_rss_bytes')).toBeLessThan(512 * 1024 * 1024);
  });

  it('a symlink loop is refused with its reason', async () => {
    const rls = await start();
    symlinkSync('loop-b.yaml', join(rls.configDir, 'loop-a.yaml'));
    symlinkSync('loop-a.yaml', join(rls.configDir, 'loop-b.yaml'));
    await refused(rls, 'unreadable', 'too many levels of symbolic links');
    await servedMeanwhile(rls);
  });

  it('a file over 1 MiB (a sparse 64 MiB one) is refused from its size, without reading it', async () => {
    const rls = await start();
    const big = join(rls.configDir, 'big.yaml');
    writeFileSync(big, '');
    truncateSync(big, 64 * 1024 * 1024);
    await servedMeanwhile(rls);
    await refused(rls, 'too_big', 'it is larger than 1048576 bytes');
  });

  it('more than 1,000 *.yaml files: the set is refused, the configuration stays', async () => {
    const rls = await start();
    // Written elsewhere and moved in one by one (a rename each), as fast as the disk goes.
    const staging = `${rls.configDir}-staging`;
    mkdirSync(staging);
    for (let i = 0; i < 1_001; i++) writeFileSync(join(staging, `d${i}.yaml`), limitOf(1, `d${i}`));
    for (let i = 0; i < 1_001; i++) renameSync(join(staging, `d${i}.yaml`), join(rls.configDir, `d${i}.yaml`));
    await refused(rls, 'too_many_files', 'more than 1000 *.yaml files');
    await servedMeanwhile(rls);
  });

  it('a file that grows while it is read is refused past the bound; once still and good, it loads', async () => {
    const rls = await start();
    const grow = join(rls.configDir, 'grow.yaml');
    writeFileSync(grow, limitOf(6, 'grow'));
    // A writer appending comment lines, in steps, up to 4 MiB: reloads start while it writes.
    const writer = spawn(process.execPath, ['-e', `
      const fs = require('node:fs');
      const line = '# ' + 'x'.repeat(1021) + '\\n';
      let written = 0;
      const step = () => {
        for (let i = 0; i < 64; i++) fs.appendFileSync(${JSON.stringify(grow)}, line);
        written += 64 * 1024;
        if (written < 4 * 1024 * 1024) setTimeout(step, 20);
      };
      step();
    `], { stdio: 'ignore' });
    const done = new Promise((r) => writer.once('exit', r));
    cleanups.push(() => writer.kill('SIGKILL'));
    await servedMeanwhile(rls);
    await refused(rls, 'too_big', 'it is larger than 1048576 bytes');
    await done;
    await servedMeanwhile(rls);
    // The last write wins: replaced by a small good file, the directory loads with it.
    writeFileSync(`${grow}.tmp`, limitOf(9, 'grow'));
    renameSync(`${grow}.tmp`, grow);
    await until(async () => {
      const r = await answered(rls.should('grow', one('a')), 'gRPC ShouldRateLimit');
      return r.statuses[0].current_limit?.requests_per_unit === 9;
    }, 'the good file in force', 30_000);
  });

  it('a long read (400 KB of descriptors, parsed in a worker thread) runs beside the service: PING and gRPC answered while it loads', async () => {
    const rls = await start();
    // 8 files of ~50 KB (parsing them takes a while, on any machine), moved in at once.
    const staging = `${rls.configDir}-staging`;
    mkdirSync(staging);
    for (let f = 0; f < 8; f++) {
      let text = `domain: bulk${f}\ndescriptors:\n`;
      for (let i = 0; text.length < 50_000; i++) text += `  - key: k${i}\n    value: v${i}\n    rate_limit: { unit: minute, requests_per_unit: ${i + 1} }\n`;
      writeFileSync(join(staging, `bulk${f}.yaml`), text);
    }
    for (let f = 0; f < 8; f++) renameSync(join(staging, `bulk${f}.yaml`), join(rls.configDir, `bulk${f}.yaml`));
    // The change's reloads first; then one asked for by SIGHUP, looked at while it runs.
    await until(async () => {
      const m = await metrics(rls);
      return counter(m, 'cellgate_rls_config_loading') === 0 && counter(m, 'ratelimit_service_config_load_success') >= 2;
    }, 'the reload of the 8 files', 120_000);
    const loadsBefore = counter(await metrics(rls), 'ratelimit_service_config_load_success');
    rls.server.proc.kill('SIGHUP');
    await until(async () => counter(await metrics(rls), 'cellgate_rls_config_loading') === 1, 'the SIGHUP reload running');
    expect(await answered(rls.redis.ping(), 'RESP PING')).toBe('PONG');
    const r = await answered(rls.should('bulk3', [{ entries: [{ key: 'k7', value: 'v7' }] }]), 'gRPC ShouldRateLimit');
    expect(r.statuses[0].current_limit!.requests_per_unit).toBe(8);
    // Both were answered while the load was still running.
    expect(counter(await metrics(rls), 'ratelimit_service_config_load_success')).toBe(loadsBefore);
    await until(async () => counter(await metrics(rls), 'ratelimit_service_config_load_success') === loadsBefore + 1, 'the SIGHUP reload done', 120_000);
  }, 300_000);

  it('a FIFO present at start: the server starts, not ready, the reason logged; it loads once the FIFO is gone', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-rls-fifo-'));
    writeFileSync(join(dir, 'app.yaml'), limitOf(5));
    const fifo = join(dir, 'pipe.yaml');
    execFileSync('mkfifo', [fifo]);
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    cleanups.unshift(() => {
      try {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // No reader holds it.
      }
    });
    const rls = await startRls({}, ['--rls-config', dir], BOUNDED);
    started.push(rls);
    await refused(rls, 'not_regular', 'it is a FIFO', 'no configuration is loaded yet');
    expect((await answered(fetch(`http://127.0.0.1:${rls.metricsPort}/readyz`), '/readyz')).status).toBe(503);
    rmSync(fifo);
    await until(async () => counter(await metrics(rls), 'cellgate_rls_config_last_load_ok') === 1, 'the load without the FIFO');
    await servedMeanwhile(rls);
  });
});
