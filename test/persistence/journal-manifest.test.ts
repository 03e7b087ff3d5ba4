/**
 * The journal manifest has one reader, shared by `cellgate-server check` and the loader: a manifest
 * `check` accepts is one the server starts from, and the other way round. Its seq is a strict
 * decimal integer from 1 to 2^53−1 (no hex, exponent, sign or leading zero), and the server never
 * writes a seq its own loader refuses: at the bound the rewrite is refused with a clear reason and
 * the journal as it is still loads. Unit tests on manifest texts, then real `check` runs and real
 * servers on journals whose manifest was edited.
 */
import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { MAX_MANIFEST_SEQ, nextSeq, parseManifest } from '../../src/persistence/journal-manifest.js';
import { JournalError } from '../../src/persistence/journal-format.js';
import { info, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile, waitFor } from './helpers.js';
import type { RunningServer } from '../helpers/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;
const aofDir = (dir: string): string => join(dir, 'appendonlydir');
const manifestOf = (dir: string): string => join(aofDir(dir), 'appendonly.aof.manifest');
const MAX = String(MAX_MANIFEST_SEQ);
const line = (seq: string, type = 'i', name = 'appendonly.aof.1.incr.aof'): string => `file ${name} seq ${seq} type ${type}\n`;

function refusal(text: string): string {
  try {
    parseManifest(text, 'm');
  } catch (e) {
    expect(e).toBeInstanceOf(JournalError);
    return (e as Error).message;
  }
  return 'accepted';
}

describe('journal manifest: the rules (unit)', () => {
  it('a manifest that names no file is refused (empty, blank lines, comments, history only)', () => {
    for (const text of ['', '\n\n', '# nothing\n', line('1', 'h')]) expect(refusal(text), JSON.stringify(text)).toContain('the manifest names no file');
  });

  it('seq is a strict decimal integer from 1 to 2^53−1', () => {
    for (const bad of ['0x1', '1e0', '+1', '-1', '0', '01', '1.0', '1_0', ' ', '١', '9007199254740992', '99999999999999999999', 'Infinity', 'NaN']) {
      const text = bad === ' ' ? 'file a seq  type i\n' : line(bad);
      expect(refusal(text), bad).not.toBe('accepted');
    }
    expect(refusal(line('0x1'))).toContain("invalid seq '0x1'");
    expect(refusal(line('1e0'))).toContain("invalid seq '1e0'");
    expect(refusal(line('9007199254740992'))).toContain('expected a decimal integer from 1 to 9007199254740991');
    expect(parseManifest(line('1'), 'm').incrs).toEqual([{ name: 'appendonly.aof.1.incr.aof', seq: 1 }]);
    expect(parseManifest(line(MAX, 'b', 'b.snap') + line(MAX), 'm')).toEqual({ base: { name: 'b.snap', seq: MAX_MANIFEST_SEQ }, incrs: [{ name: 'appendonly.aof.1.incr.aof', seq: MAX_MANIFEST_SEQ }] });
  });

  it('the next seq past 2^53−1 is refused with what to do, never written', () => {
    expect(nextSeq(MAX_MANIFEST_SEQ - 1)).toBe(MAX_MANIFEST_SEQ);
    expect(() => nextSeq(MAX_MANIFEST_SEQ)).toThrow(/have reached 9007199254740991, the largest a manifest holds/);
  });
});

/** A real journal of `n` keys (base seq 1, incremental file seq 1), its server killed. */
async function journalOf(n: number): Promise<string> {
  const dir = newDir();
  const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
  const r = new Redis(s.port);
  try {
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    for (let i = 0; i < n; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60, 1);
    await r.call('DEBUG', 'SLEEP', '0.002');
  } finally {
    r.disconnect();
  }
  await s.stop('SIGKILL');
  return dir;
}

function start(dir: string): { status: number | null; out: string } {
  const r = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--warmup', 'no', '--save', '']);
  return { status: r.status, out: r.stdout + r.stderr };
}

describe('journal manifest: check and the loader agree (real processes)', () => {
  for (const [what, text, reason] of [
    ['an empty manifest', '', 'the manifest names no file'],
    ['seq 0x1', `${line('0x1', 'b', 'appendonly.aof.1.base.snap')}${line('1')}`, "invalid seq '0x1'"],
    ['seq 1e0', `${line('1', 'b', 'appendonly.aof.1.base.snap')}${line('1e0')}`, "invalid seq '1e0'"],
    ['seq 2^53', `${line('1', 'b', 'appendonly.aof.1.base.snap')}${line('9007199254740992')}`, "invalid seq '9007199254740992'"],
  ]) {
    it(`${what}: check refuses it (exit 1) and so does the start, with the same reason`, async () => {
      const dir = await journalOf(3);
      writeFileSync(manifestOf(dir), text);
      const check = runToExit(['check', aofDir(dir)]);
      expect(check.status, check.stdout).toBe(1);
      expect(check.stderr).toContain(reason);
      const started = start(dir);
      expect(started.status).toBe(1);
      expect(started.out).toContain(reason);
    });
  }

  it('a manifest at seq 2^53−1 loads, and its rewrite is refused with a clear reason instead of writing seq 2^53; the journal still loads after kill -9', async () => {
    const dir = await journalOf(5);
    writeFileSync(manifestOf(dir), line(MAX, 'b', 'appendonly.aof.1.base.snap') + line(MAX));
    const check = runToExit(['check', aofDir(dir)]);
    expect(check.status, check.stdout + check.stderr).toBe(0);
    let s: RunningServer = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0']);
    let r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await r.dbsize()).toBe(5);
      await expect(r.bgrewriteaof()).rejects.toThrow("ERR Can't execute an AOF background rewriting");
      // The log line comes through the process's output, read a moment after the reply on a busy machine.
      await waitFor('the refusal logged', async () => s.logs.some((l) => l.includes("Can't rewrite the append only file") && l.includes('have reached 9007199254740991, the largest a manifest holds')), WAIT_LIMIT_MS);
      const i = await info(r);
      expect(i.aof_last_bgrewrite_status).toBe('err');
      // Decisions go on into the open file; the manifest is as it was.
      await r.call('CL.THROTTLE', 'k0', 5, 10, 60, 1);
      await r.call('CL.THROTTLE', 'new', 5, 10, 60, 2);
      const left = [((await r.call('CL.THROTTLE', 'k0', 5, 10, 60, 0)) as number[])[2], ((await r.call('CL.THROTTLE', 'new', 5, 10, 60, 0)) as number[])[2]];
      expect(readFileSync(manifestOf(dir), 'latin1')).toBe(line(MAX, 'b', 'appendonly.aof.1.base.snap') + line(MAX));
      expect(readdirSync(aofDir(dir)).filter((n) => n.includes('9007199254740992'))).toEqual([]);
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      await s.stop('SIGKILL');
      const again = runToExit(['check', aofDir(dir)]);
      expect(again.status, again.stdout + again.stderr).toBe(0);
      s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0']);
      r = new Redis(s.port);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await waitFor('loaded', async () => (await info(r)).loading === '0', WAIT_LIMIT_MS);
      expect(await r.dbsize()).toBe(6);
      expect([((await r.call('CL.THROTTLE', 'k0', 5, 10, 60, 0)) as number[])[2], ((await r.call('CL.THROTTLE', 'new', 5, 10, 60, 0)) as number[])[2]]).toEqual(left);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});
