/**
 * `rls-config` replaced the ways operators replace it (docs/envoy.md, "Reloads"), against a real
 * server, each reloaded without SIGHUP: a symlink swapped atomically (`ln -s v2 new && mv -Tf new
 * current`), envoyproxy/ratelimit's runtime layout with the swapped symlink above the directory
 * (RUNTIME_ROOT=current, `current/ratelimit/config`), a directory deleted and created again, and a
 * Kubernetes ConfigMap's `..data` swap; after a swap, a change inside the new target reloads too.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startRls, until, type Rls } from './helpers.js';

const limitOf = (n: number) => `domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: ${n} }\n`;

const root = mkdtempSync(join(tmpdir(), 'cellgate-rls-swap-'));
const started: Rls[] = [];
afterAll(async () => {
  for (const r of started) await r.stop();
  rmSync(root, { recursive: true, force: true });
});

let serial = 0;
function fresh(): string {
  const d = join(root, `case${++serial}`);
  mkdirSync(d);
  return d;
}

/** A server whose rls-config is `dir` (not the helper's own directory). */
async function serving(dir: string): Promise<Rls> {
  const rls = await startRls({}, ['--rls-config', dir]);
  started.push(rls);
  return rls;
}

let calls = 0;
/** The limit in force for domain `app`, key `k` (a fresh value each time: nothing is spent twice). */
async function limitInForce(rls: Rls): Promise<number | undefined> {
  const r = await rls.should('app', [{ entries: [{ key: 'k', value: `v${++calls}` }] }]);
  return r.statuses[0].current_limit?.requests_per_unit;
}

async function reloadsTo(rls: Rls, n: number, what: string): Promise<void> {
  await until(async () => (await limitInForce(rls)) === n, `${what}: requests_per_unit ${n} in force without SIGHUP`, 30_000);
  expect(rls.server.logs.some((l) => l.includes('rls-config loaded (SIGHUP)'))).toBe(false);
}

/** `ln -s target new && mv -Tf new link`: the atomic swap. */
function swapLink(dir: string, link: string, target: string): void {
  symlinkSync(target, join(dir, `${link}.new`));
  execFileSync('mv', ['-Tf', join(dir, `${link}.new`), join(dir, link)]);
}

describe('rls-config swapped', () => {
  it('a symlink to the directory swapped with mv -Tf reloads; then a write inside the new target reloads', async () => {
    const d = fresh();
    mkdirSync(join(d, 'v1'));
    mkdirSync(join(d, 'v2'));
    writeFileSync(join(d, 'v1', 'app.yaml'), limitOf(1));
    writeFileSync(join(d, 'v2', 'app.yaml'), limitOf(2));
    symlinkSync('v1', join(d, 'current'));
    const rls = await serving(join(d, 'current'));
    expect(await limitInForce(rls)).toBe(1);
    swapLink(d, 'current', 'v2');
    await reloadsTo(rls, 2, 'after the swap');
    writeFileSync(join(d, 'v2', 'app.yaml'), limitOf(3));
    await reloadsTo(rls, 3, 'after a write in the new target');
  });

  it("envoyproxy/ratelimit's runtime layout: RUNTIME_ROOT `current` swapped above current/ratelimit/config reloads", async () => {
    const d = fresh();
    for (const [v, n] of [['v1', 1], ['v2', 2]] as const) {
      mkdirSync(join(d, v, 'ratelimit', 'config'), { recursive: true });
      writeFileSync(join(d, v, 'ratelimit', 'config', 'app.yaml'), limitOf(n));
    }
    symlinkSync('v1', join(d, 'current'));
    const rls = await serving(join(d, 'current', 'ratelimit', 'config'));
    expect(await limitInForce(rls)).toBe(1);
    swapLink(d, 'current', 'v2');
    await reloadsTo(rls, 2, 'after the swap of current');
  });

  it('the directory deleted and created again reloads, and so do writes in the new one', async () => {
    const d = fresh();
    const conf = join(d, 'conf');
    mkdirSync(conf);
    writeFileSync(join(conf, 'app.yaml'), limitOf(1));
    const rls = await serving(conf);
    expect(await limitInForce(rls)).toBe(1);
    rmSync(conf, { recursive: true });
    mkdirSync(conf);
    writeFileSync(join(conf, 'app.yaml'), limitOf(2));
    await reloadsTo(rls, 2, 'after the re-creation');
    writeFileSync(join(conf, 'app.yaml'), limitOf(3));
    await reloadsTo(rls, 3, 'after a write in the new directory');
  });

  it("a mounted ConfigMap's ..data swap reloads", async () => {
    const d = fresh();
    const conf = join(d, 'conf');
    mkdirSync(join(conf, '..2026_01_01_00_00_00.1'), { recursive: true });
    writeFileSync(join(conf, '..2026_01_01_00_00_00.1', 'app.yaml'), limitOf(1));
    symlinkSync('..2026_01_01_00_00_00.1', join(conf, '..data'));
    symlinkSync('..data/app.yaml', join(conf, 'app.yaml'));
    const rls = await serving(conf);
    expect(await limitInForce(rls)).toBe(1);
    // What the kubelet does: a new timestamped directory, `..data` renamed onto it, the old one removed.
    mkdirSync(join(conf, '..2026_01_01_00_01_00.2'));
    writeFileSync(join(conf, '..2026_01_01_00_01_00.2', 'app.yaml'), limitOf(2));
    symlinkSync('..2026_01_01_00_01_00.2', join(conf, '..data_tmp'));
    renameSync(join(conf, '..data_tmp'), join(conf, '..data'));
    rmSync(join(conf, '..2026_01_01_00_00_00.1'), { recursive: true });
    await reloadsTo(rls, 2, 'after the ..data swap');
  });
});
