/**
 * The journal's read-ahead worker at start (src/persistence/journal-read-ahead.ts), with real
 * processes, on a journal of many batches (DELs, a FLUSHALL, blobs of sliding logs): the worker, the
 * main thread alone (aof-load-worker no) and a worker that fails part-way (test-fail: it throws
 * after its first batch, the main thread goes on from there) load the same keys with the same
 * state; a corrupt record far into the file refuses the start with the same message either way, as
 * `check` reports it; a torn tail there is cut the same way.
 */
import { describe, expect, it } from 'vitest';
import { appendFileSync, cpSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { JournalParser } from '../../src/persistence/journal-parse.js';
import { BATCH_RECORDS } from '../../src/persistence/journal-read-ring.js';
import { runToExit, startOn, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;
const KEYS = 6000;
const aofDir = (dir: string): string => join(dir, 'appendonlydir');

function incrPath(dir: string): string {
  const names = readdirSync(aofDir(dir)).filter((n) => n.endsWith('.incr.aof'));
  expect(names.length).toBe(1);
  return join(aofDir(dir), names[0]);
}

const gcraKey = (i: number): string => `g:${i}`;
const logKey = (i: number): string => `log:${i}`;

/**
 * A journal of ~5 batches of records: keys spent before a FLUSHALL, then KEYS GCRA keys spent 3
 * times, 200 sliding logs of 1 to 4 entries (the records of those with 2 or more carry blobs),
 * every tenth GCRA key deleted.
 */
async function bigJournal(): Promise<string> {
  const dir = newDir();
  const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
  const r = new Redis(s.port);
  try {
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const p = r.pipeline();
    for (let i = 0; i < 500; i++) p.call('CL.THROTTLE', `before-flush:${i}`, 5, 10, 60);
    p.flushall();
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < KEYS; i++) p.call('CL.THROTTLE', gcraKey(i), 9, 10, 60, 1 + ((i + round) % 3));
    }
    // A millisecond apart, so that each log holds several entries: a ring in a blob (one entry is inline).
    for (let n = 0; n < 4; n++) {
      for (let i = 0; i < 200; i++) if (n <= i % 4) p.call('RL.SLIDINGLOG', logKey(i), 10, 60_000);
      p.call('DEBUG', 'CLOCK', 'ADVANCE', '1');
    }
    for (let i = 0; i < KEYS; i += 10) p.del(gcraKey(i));
    await p.exec();
    await r.call('DEBUG', 'SLEEP', '0.002');
  } finally {
    r.disconnect();
  }
  expect(await s.stop('SIGKILL')).toBe(null);
  return dir;
}

/** Every key's type, a peek at its state (cost 0) and its PTTL, a second after T0, from a server started on a copy of `dir`. */
async function loadAndRead(dir: string, args: string[]): Promise<{ logs: string[]; content: unknown[] }> {
  const copy = newDir();
  cpSync(aofDir(dir), aofDir(copy), { recursive: true });
  const s = await startOn(copy, ['--appendonly', 'yes', '--save', '', ...args]);
  const r = new Redis(s.port);
  try {
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 1000));
    const p = r.pipeline();
    p.dbsize();
    p.exists('before-flush:1');
    for (let i = 0; i < KEYS; i++) {
      p.type(gcraKey(i));
      p.call('CL.THROTTLE', gcraKey(i), 9, 10, 60, 0);
      p.pttl(gcraKey(i));
    }
    for (let i = 0; i < 200; i++) {
      p.type(logKey(i));
      p.call('RL.SLIDINGLOG', logKey(i), 10, 60_000, 'COST', 0);
      p.pttl(logKey(i));
    }
    const replies = (await p.exec())!;
    for (const [err] of replies) expect(err).toBe(null);
    return { logs: s.logs, content: replies.map(([, v]) => v) };
  } finally {
    r.disconnect();
    await s.stop();
  }
}

describe('journal: the read-ahead worker at start', () => {
  it('the worker, the main thread alone and a worker that fails part-way load the same keys with the same state', async () => {
    const dir = await bigJournal();
    const records = new JournalParser(readFileSync(incrPath(dir)), incrPath(dir)).next(() => {}, Number.MAX_SAFE_INTEGER)!.records;
    expect(records).toBeGreaterThan(4 * BATCH_RECORDS);

    const alone = await loadAndRead(dir, ['--aof-load-worker', 'no']);
    expect(alone.content[0]).toBe(KEYS - KEYS / 10 + 200);
    expect(alone.content[1]).toBe(0);
    expect(alone.logs.some((l) => l.includes(`${records} records from 1 incremental files`))).toBe(true);

    const worker = await loadAndRead(dir, []);
    expect(worker.content).toEqual(alone.content);
    expect(worker.logs.some((l) => l.includes(`${records} records from 1 incremental files`))).toBe(true);
    expect(worker.logs.some((l) => l.includes('read-ahead worker failed'))).toBe(false);

    const failed = await loadAndRead(dir, ['--aof-load-worker', 'test-fail']);
    expect(failed.content).toEqual(alone.content);
    expect(failed.logs.some((l) => l.includes(`${records} records from 1 incremental files`))).toBe(true);
    const warning = failed.logs.find((l) => l.includes('read-ahead worker failed'));
    expect(warning).toBeDefined();
    expect(warning).toContain('aof-load-worker test-fail');
    // It had applied whole batches when it learned of the failure, and the main thread went on from the record after them.
    expect(Number(/from record (\d+)/.exec(warning!)?.[1]) % BATCH_RECORDS).toBe(0);
  });

  it('a corrupt record far into the file refuses the start with the same message with the worker or without, as check does; a torn tail there is cut alike', async () => {
    const dir = await bigJournal();
    const incr = incrPath(dir);
    const bytes = readFileSync(incr);
    // A byte in the middle of a record at about three quarters of the file (past several batches).
    const parser = new JournalParser(bytes, incr);
    parser.next(() => {}, 3 * BATCH_RECORDS + 17);
    const recordAt = parser.offset;
    const corruptAt = recordAt + 3;
    const corrupt = Buffer.from(bytes);
    corrupt[corruptAt] ^= 0x10;
    writeFileSync(incr, corrupt);

    const c = runToExit(['check', aofDir(dir)]);
    expect(c.status).toBe(1);
    const problem = /journal (\S+): corrupt record (\d+): [^\n]* at byte offset (\d+)/.exec(c.stderr);
    expect(problem).not.toBe(null);
    expect(Number(problem![2])).toBe(3 * BATCH_RECORDS + 17);
    for (const mode of ['yes', 'no', 'test-fail']) {
      const refused = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--warmup', 'no', '--aof-load-worker', mode]);
      expect(refused.status).toBe(1);
      expect(refused.stdout + refused.stderr).toContain(`${problem![0]}; refusing to start (the files are left untouched)`);
    }
    expect(readFileSync(incr).equals(corrupt)).toBe(true);

    // The file whole again, and a half record at its end.
    const whole = bytes.length;
    writeFileSync(incr, bytes);
    appendFileSync(incr, bytes.subarray(recordAt, recordAt + 8));
    const alone = await loadAndRead(dir, ['--aof-load-worker', 'no']);
    const worker = await loadAndRead(dir, []);
    expect(worker.content).toEqual(alone.content);
    for (const { logs } of [alone, worker]) {
      expect(logs.some((l) => l.includes('AOF loaded anyway because aof-load-truncated is enabled: 8 bytes cut at offset'))).toBe(true);
    }
    expect(statSync(incr).size).toBe(whole + 8);
  });

  it('an incremental file the manifest names and the directory lacks refuses the start with the same message with the worker or without', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
    const r = new Redis(s.port);
    try {
      await r.call('CL.THROTTLE', 'k', 5, 10, 60);
    } finally {
      r.disconnect();
    }
    expect(await s.stop('SIGKILL')).toBe(null);
    const incr = incrPath(dir);
    rmSync(incr);
    for (const mode of ['yes', 'no']) {
      const refused = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--warmup', 'no', '--aof-load-worker', mode]);
      expect(refused.status).toBe(1);
      expect(refused.stdout + refused.stderr).toContain(`journal ${incr}: an incremental file the manifest names does not exist at byte offset 0`);
    }
  });
});
