/**
 * Small helpers shared by the server tests: the text of an expected error reply, and a cellgate
 * process run to its exit (for startup errors and the `check` subcommand).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAIN } from './server.js';

/** The message of the error reply `p` must end with; fails the test if it succeeds. */
export async function errorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('expected an error reply');
}

/**
 * Runs `cellgate-server <args>` to its exit and returns its status and output. It runs in a fresh
 * empty directory, so the default `dir` (./data) is its own: never the checkout's, which a running
 * `npm start` holds locked.
 */
export function runToExit(args: string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const cwd = mkdtempSync(join(tmpdir(), 'cellgate-run-'));
  const r = spawnSync(process.execPath, [MAIN, ...args], { cwd, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
