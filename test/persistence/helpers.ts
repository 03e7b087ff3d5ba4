/**
 * Helpers for the persistence tests: a server started on a directory the test keeps (the snapshot
 * must outlive the process), a fast raw-socket filler, INFO parsing and `check`/startup runs to exit.
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll } from 'vitest';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { fillThrottleKeys } from '../../bench/fill.mjs';
import { MAIN, startServer, type RunningServer } from '../helpers/server.js';

export { MAIN };

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'cellgate-persist-'));
}

/**
 * For a test file: a maker of snapshot directories that are all removed after the file's tests
 * (they must outlive each server, since restarts read them).
 */
export function tempDirsForFile(): () => string {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  return () => {
    const d = tempDir();
    dirs.push(d);
    return d;
  };
}

/**
 * A frozen instant ten minutes ahead of the real clock, so saved keys (which live about a minute of
 * server time) are still unexpired by real time when the next process loads them. It is a whole
 * minute: fixed and sliding windows of 60 s are aligned to minutes, and a test that spends a few
 * seconds of server time after T0 must not cross a window end (the key would expire in between).
 */
export const T0_AHEAD_MS = Math.floor(Date.now() / 60_000) * 60_000 + 600_000;

/** Starts a server whose snapshot directory is `dir` (later flags win over the helper's own --dir). */
export function startOn(dir: string, args: string[] = []): Promise<RunningServer> {
  return startServer({ args: ['--dir', dir, ...args] });
}

export { runToExit } from '../helpers/replies.js';

export async function info(redis: Redis, section = 'persistence'): Promise<Record<string, string>> {
  const text = await redis.info(section);
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

export async function waitFor(what: string, test: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export async function waitForBgsave(redis: Redis): Promise<Record<string, string>> {
  let last: Record<string, string> = {};
  await waitFor('the background save to end', async () => {
    last = await info(redis);
    return last.rdb_bgsave_in_progress === '0';
  });
  return last;
}

/**
 * Creates `n` CL.THROTTLE keys `prefix0..prefix(n-1)`, pipelined over one raw socket (a million in a
 * few seconds). Each key is a bucket of 101 tokens refilled one per hour, so it lives about an hour.
 */
export function fillKeys(port: number, n: number, prefix = 'k:'): Promise<void> {
  return fillThrottleKeys(port, n, { prefix });
}

/**
 * Makes every save into `dir` fail (ENOTDIR), even as root, without knowing a temp file's name
 * (random: writer.ts tempPath): the directory is moved to `<dir>.away` and a plain file takes its
 * place. `restore()` puts the directory back. The server keeps its lock file in the moved directory.
 */
export function blockDir(dir: string): { away: string; restore(): void } {
  const away = `${dir}.away`;
  renameSync(dir, away);
  writeFileSync(dir, 'not a directory');
  return {
    away,
    restore() {
      rmSync(dir, { force: true });
      renameSync(away, dir);
    },
  };
}

/** The cellgate_aof_* gauges of the metrics port on `port`. */
export async function aofMetrics(port: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(cellgate_aof_[a-z_]+) (\S+)$/.exec(line);
    if (m !== null) out.set(m[1], Number(m[2]));
  }
  return out;
}

/** /readyz of the metrics port on `port`: its status and body. */
export async function readyz(port: number): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: await res.text() };
}
