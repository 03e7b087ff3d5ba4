/**
 * `kill -9` in the middle of a background save of a million keys: the previous snapshot is still
 * there, byte for byte, and loads; the partial temp file is never mistaken for a snapshot.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { fillKeys, info, runToExit, startOn, tempDir } from './helpers.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('crash during BGSAVE', () => {
  it('kill -9 while a BGSAVE of 1M keys is writing leaves the previous snapshot intact and loadable', async () => {
    const dir = tempDir();
    dirs.push(dir);
    let s = await startOn(dir, ['--save', '']);
    let r = new Redis(s.port);
    await fillKeys(s.port, 1000, 'old:');
    expect(await r.save()).toBe('OK');
    const previous = readFileSync(join(dir, 'cellgate.snap'));

    await fillKeys(s.port, 1_000_000);
    expect(await r.dbsize()).toBe(1_001_000);
    // A background save writes .cellgate-temp-<pid>-<random>.snap.
    const tempOf = (): string | undefined => readdirSync(dir).find((n) => n.startsWith(`.cellgate-temp-${s.proc.pid}-`));
    expect(await r.bgsave()).toBe('Background saving started');
    // Wait until the save has written part of the file, then kill the process outright.
    const until = Date.now() + 10_000;
    let temp = '';
    for (;;) {
      const name = tempOf();
      if (name !== undefined && statSync(join(dir, name), { throwIfNoEntry: false })?.isFile() && statSync(join(dir, name)).size > 1_000_000) {
        temp = join(dir, name);
        break;
      }
      if (Date.now() > until) throw new Error('the background save never got going');
      await new Promise((res) => setTimeout(res, 2));
    }
    expect(temp).toMatch(/\.cellgate-temp-\d+-[0-9a-f]{16}\.snap$/);
    expect((await info(r)).rdb_bgsave_in_progress).toBe('1');
    r.disconnect();
    expect(await s.stop('SIGKILL')).toBe(null);

    expect(readFileSync(join(dir, 'cellgate.snap')).equals(previous)).toBe(true);
    const c = runToExit(['check', join(dir, 'cellgate.snap')]);
    expect(c.status).toBe(0);
    expect(c.stdout).toContain('\nkeys: 1000\n');
    // The leftover partial temp file is refused by check: it is no snapshot.
    expect(existsSync(temp)).toBe(true);
    expect(runToExit(['check', temp]).status).toBe(1);
    // A temp file whose pid is alive (this test runner) may be another server's save in progress.
    const othersTemp = join(dir, `.cellgate-temp-${process.pid}.snap`);
    writeFileSync(othersTemp, 'in progress');

    s = await startOn(dir, ['--save', '']);
    r = new Redis(s.port);
    try {
      expect(await r.dbsize()).toBe(1000);
      expect(await r.exists('old:999')).toBe(1);
      // The dead process's partial file is removed at start; the live one's is left alone.
      expect(existsSync(temp)).toBe(false);
      expect(s.logs.some((l) => l.includes(`removed ${temp}, left by a save that never finished`))).toBe(true);
      expect(readFileSync(othersTemp, 'utf8')).toBe('in progress');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('SIGTERM during a BGSAVE abandons it and writes a complete final snapshot, then exits 0', async () => {
    const dir = tempDir();
    dirs.push(dir);
    const s = await startOn(dir);
    const r = new Redis(s.port);
    await fillKeys(s.port, 500_000);
    // The signal follows the reply within a millisecond or so; a BGSAVE of 500k keys takes > 100 ms.
    expect(await r.bgsave()).toBe('Background saving started');
    expect(await s.stop('SIGTERM')).toBe(0);
    r.disconnect();
    expect(s.logs.some((l) => l.includes('background save in progress: stopping it'))).toBe(true);
    const c = runToExit(['check', join(dir, 'cellgate.snap')]);
    expect(c.status).toBe(0);
    expect(c.stdout).toContain('\nkeys: 500000\n');
    expect(readdirSync(dir).filter((n) => n.startsWith('.cellgate-temp-'))).toEqual([]);
  });
});
