/**
 * Leases survive restarts with their expiries: a snapshot (SAVE, kill -9, restart) and the journal
 * (appendonly yes, kill -9, replay) give back every live lease, so the same ids are held, renewed
 * and released as before, and ended ones stay gone. The loaders' check (`cellgate-server check`
 * and leaseStateProblem) refuses leases that could not have been stored; a version 1 snapshot
 * still loads, but not one claiming to hold leases; a version 1 journal file (appended to after an
 * upgrade) loads with its leases.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { crc32, entryProblem, FORMAT_VERSION } from '../../src/persistence/format.js';
import { CONCURRENCY_TYPE, leaseAcquire, leaseStateProblem, newLeaseDecision } from '../../src/limiters/concurrency.js';
import { runToExit, startOn, T0_AHEAD_MS, tempDirsForFile } from '../persistence/helpers.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;

/** Leases at T0: a full key of 3 (one renewed, one released), a key ending early, a key with a long id. */
async function writeLeases(r: Redis): Promise<void> {
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  await r.call('RL.ACQUIRE', 'l:full', '3', '60000', 'ID', 'a');
  await r.call('RL.ACQUIRE', 'l:full', '3', '60000', 'ID', 'b');
  await r.call('RL.ACQUIRE', 'l:full', '3', '60000', 'ID', 'c');
  await r.call('RL.RENEW', 'l:full', 'b', '120000');
  await r.call('RL.RELEASE', 'l:full', 'c');
  await r.call('RL.ACQUIRE', 'l:full', '3', '30000', 'ID', 'd');
  await r.call('RL.ACQUIRE', 'l:short', '1', '500', 'ID', 'gone-soon');
  await r.call('RL.ACQUIRE', 'l:long', '2', '90000', 'ID', 'x'.repeat(64));
  await r.call('RL.ACQUIRE', 'l:bin', '2', '90000', 'ID', Buffer.from([0, 255, 13, 10, 128]));
}

/** What must be the same after a restart, at T0 + 1 s (the short key has ended by then). */
async function observe(r: Redis): Promise<unknown[]> {
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 1000));
  const out: unknown[] = [];
  for (const key of ['l:full', 'l:short', 'l:long', 'l:bin']) out.push(key, await r.type(key), await r.pttl(key));
  out.push(await r.call('RL.ACQUIRE', 'l:full', '3', '1000'));
  return out;
}

async function afterRestart(r: Redis): Promise<void> {
  expect(await r.call('RL.RELEASE', 'l:full', 'a')).toBe(1);
  expect(await r.call('RL.RELEASE', 'l:full', 'c')).toBe(0);
  expect(await r.call('RL.RENEW', 'l:long', 'x'.repeat(64), '1000')).toBe(1);
  expect(await r.call('RL.RELEASE', 'l:bin', Buffer.from([0, 255, 13, 10, 128]))).toBe(1);
  expect(await r.exists('l:bin')).toBe(0);
}

describe('leases across restarts', () => {
  it('SAVE, kill -9, restart: live leases come back with their expiries; check validates the file', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--save', '']);
    let r = new Redis({ port: s.port, protocol: 2 });
    await writeLeases(r);
    const before = await observe(r);
    expect(before.slice(0, 6)).toEqual(['l:full', 'concurrency', 119000, 'l:short', 'none', -2]);
    expect(before[12]).toEqual([1, 3, 0, 29000, 119000, 0, null]);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.save();
    r.disconnect();
    expect(await s.stop('SIGKILL')).toBe(null);
    const c = runToExit(['check', join(dir, 'cellgate.snap')]);
    expect(c.stderr).toBe('');
    expect(c.status).toBe(0);
    // l:short ended at T0 + 500 ms and was dropped when observe() looked at it.
    expect(c.stdout).toMatch(/keys_concurrency: 3/);
    s = await startOn(dir, ['--save', '']);
    r = new Redis({ port: s.port, protocol: 2 });
    try {
      expect(await observe(r)).toEqual(before);
      await afterRestart(r);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('appendonly yes, kill -9: the journal replays every lease change', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always']);
    let r = new Redis({ port: s.port, protocol: 2 });
    await writeLeases(r);
    // Keys created and deleted within one turn (a pipeline), their storage reused by the next key:
    // the journal ends with only the leases still held.
    const churn = r.pipeline();
    for (let i = 0; i < 300; i++) {
      churn.call('RL.ACQUIRE', `l:churn:${i % 7}`, '2', '60000', 'ID', `c${i}`);
      if (i % 50 !== 0) churn.call('RL.RELEASE', `l:churn:${i % 7}`, `c${i}`);
    }
    await churn.exec();
    const held = (await r.keys('l:churn:*')).sort();
    expect(held.length).toBeGreaterThan(0);
    const before = await observe(r);
    r.disconnect();
    expect(await s.stop('SIGKILL')).toBe(null);
    // The incremental file as an older build started it (version 1) and this one appended to after
    // an upgrade: its lease records load all the same.
    const journalDir = join(dir, 'appendonlydir');
    const incrs = readdirSync(journalDir).filter((n) => n.endsWith('.incr.aof'));
    expect(incrs.length).toBeGreaterThan(0);
    for (const name of incrs) {
      const b = readFileSync(join(journalDir, name));
      expect(b.readUInt32LE(8)).toBe(2);
      b.writeUInt32LE(1, 8);
      writeFileSync(join(journalDir, name), b);
    }
    s = await startOn(dir, ['--save', '', '--appendonly', 'yes']);
    r = new Redis({ port: s.port, protocol: 2 });
    try {
      // observe() spent a slot of l:full at T0 + 1 s (limited: nothing written), so it answers the same.
      expect(await observe(r)).toEqual(before);
      expect((await r.keys('l:churn:*')).sort()).toEqual(held);
      for (let i = 0; i < 300; i += 50) expect(await r.call('RL.RELEASE', `l:churn:${i % 7}`, `c${i}`)).toBe(1);
      expect(await r.keys('l:churn:*')).toEqual([]);
      await afterRestart(r);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('a version 1 snapshot loads; one holding leases is refused as corrupt', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--save', '']);
    let r = new Redis({ port: s.port, protocol: 2 });
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.TOKENBUCKET', 'v:tb', '5', '60000');
    await r.save();
    r.disconnect();
    await s.stop('SIGKILL');
    const file = join(dir, 'cellgate.snap');
    expect(readFileSync(file).readUInt32LE(8)).toBe(FORMAT_VERSION);
    expect(FORMAT_VERSION).toBe(2);
    const asVersion1 = (b: Buffer): Buffer => {
      const out = Buffer.from(b);
      out.writeUInt32LE(1, 8);
      out.writeUInt32LE(crc32(out.subarray(0, out.length - 4)), out.length - 4);
      return out;
    };
    writeFileSync(file, asVersion1(readFileSync(file)));
    s = await startOn(dir, ['--save', '']);
    r = new Redis({ port: s.port, protocol: 2 });
    expect(await r.type('v:tb')).toBe('tokenbucket');
    await r.call('RL.ACQUIRE', 'v:lease', '1', '60000', 'ID', 'a');
    await r.save();
    r.disconnect();
    await s.stop('SIGKILL');
    writeFileSync(file, asVersion1(readFileSync(file)));
    const c = runToExit(['check', file]);
    expect(c.status).not.toBe(0);
    expect(c.stderr + c.stdout).toMatch(/unknown key type 8 in a version 1 file/);
  });
});

describe('check refuses leases a limiter could not have stored', () => {
  it('a lease ending after its key expires: check names the key entry and the rule; the server refuses to start', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--save', '']);
    const r = new Redis({ port: s.port, protocol: 2 });
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'only', '2', '60000', 'ID', 'a');
    await r.save();
    r.disconnect();
    await s.stop('SIGKILL');
    const file = join(dir, 'cellgate.snap');
    const b = readFileSync(file);
    // The one entry: header (24), type, flags, key length u32, key, expiry, A, B, C, blob length, blob.
    const entry = 24;
    expect(b[entry]).toBe(CONCURRENCY_TYPE);
    const keyLength = b.readUInt32LE(entry + 2);
    const expiry = entry + 6 + keyLength;
    const blobStart = expiry + 32 + 4;
    expect(b.readDoubleLE(blobStart)).toBe(b.readDoubleLE(expiry));
    b.writeDoubleLE(b.readDoubleLE(expiry) + 1, blobStart);
    b.writeUInt32LE(crc32(b.subarray(0, b.length - 4)), b.length - 4);
    writeFileSync(file, b);
    const c = runToExit(['check', file]);
    expect(c.status).toBe(1);
    expect(c.stderr + c.stdout).toMatch(/concurrency lease 0: end \d+ is not an integer in order up to the expiry/);
  });
});

describe('leaseStateProblem', () => {
  /** A valid state of n leases ending at 1000 + 10 i, ids `id<i>`. */
  function state(n: number): { a: number; b: number; blob: Float64Array; exp: number } {
    const d = newLeaseDecision();
    let has = false;
    for (let i = 0; i < n; i++) {
      const id = Buffer.from(`id${i}`);
      leaseAcquire(100, 1000, has, d.count, d.used, d.blob, id, 0, id.length, 10 * i, d);
      has = true;
    }
    return { a: d.count, b: d.used, blob: d.blob!, exp: d.expireAtMs };
  }

  it('accepts what the limiter stores, refuses what it cannot store', () => {
    const s = state(5);
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, s.blob)).toBe(null);
    expect(entryProblem(CONCURRENCY_TYPE, s.exp, s.a, s.b, 0, s.blob)).toBe(null);
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, undefined)).toMatch(/without leases/);
    expect(leaseStateProblem(s.exp, s.a + 1, s.b, 0, s.blob)).toMatch(/count 6, but 5 leases/);
    expect(leaseStateProblem(s.exp + 1, s.a, s.b, 0, s.blob)).toMatch(/last lease's end/);
    expect(leaseStateProblem(s.exp, s.a, s.b, 1, s.blob)).toMatch(/state C/);
    const swapped = Float64Array.from(s.blob);
    swapped[0] = 5000;
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, swapped)).toMatch(/in order/);
    const badHeader = Float64Array.from(s.blob);
    badHeader[1] += 1;
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, badHeader)).not.toBe(null);
    const badWord = Float64Array.from(s.blob);
    badWord[2] = 2 ** 48;
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, badWord)).not.toBe(null);
    const spare = new Float64Array(s.blob.length + 4);
    spare.set(s.blob);
    spare[spare.length - 1] = 7;
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, spare)).toMatch(/spare/);
    const fraction = Float64Array.from(s.blob);
    fraction[0] = 0.5;
    expect(leaseStateProblem(s.exp, s.a, s.b, 0, fraction)).toMatch(/not an integer/);
  });

  it('refuses an id stored twice', () => {
    const d = newLeaseDecision();
    const id = Buffer.from('same');
    leaseAcquire(5, 1000, false, 0, 0, undefined, id, 0, 4, 0, d);
    const one = d.blob!.slice(0, d.used);
    const two = new Float64Array(2 * one.length);
    two.set(one);
    two.set(one, one.length);
    expect(leaseStateProblem(1000, 2, two.length, 0, two)).toMatch(/twice/);
  });
});
