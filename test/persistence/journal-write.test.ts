/**
 * The journal's commit and fsync (journal-write.ts) on real files, in-process: what a server test
 * cannot make happen on purpose, such as an fsync that ends after its file was switched and its
 * descriptor number handed to a newer file.
 */
import { describe, expect, it } from 'vitest';
import { mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { JournalRecorder } from '../../src/persistence/journal-encode.js';
import { encodeJournalHeader, JOURNAL_HEADER_BYTES } from '../../src/persistence/journal-format.js';
import { JournalWriter } from '../../src/persistence/journal-write.js';
import type { Server } from '../../src/server/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

/** The three things the writer asks of its server: a log, the MISCONF gate's refresh, a task failure report. */
function serverForWriter(warnings: string[]): Server {
  return {
    log: { warning: (m: string) => warnings.push(m), notice: () => {} },
    snapshots: { refreshDenyWrites: () => {} },
    tasks: { failed: (what: string, e: unknown) => warnings.push(`${what}: ${String(e)}`) },
  } as unknown as Server;
}

function newFile(path: string): number {
  const fd = openSync(path, 'wx+');
  writeSync(fd, encodeJournalHeader());
  return fd;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function fsyncEnded(writer: JournalWriter): Promise<void> {
  for (let i = 0; i < WAIT_LIMIT_MS / 10 && writer.fsyncInFlight; i++) await sleep(10);
  expect(writer.fsyncInFlight).toBe(false);
}

describe('journal writer', () => {
  it("records waiting for the write timer are written by a later turn's commit once their millisecond is over, before that turn's replies", () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-jw-'));
    const ks = new Keyspace();
    const recorder = new JournalRecorder(ks);
    ks.journal = recorder;
    const writer = new JournalWriter(serverForWriter([]), recorder, { currentPath: () => dir, lostRecords: () => {}, diskTookWrites: () => {} });
    const spend = (key: string): void => {
      const slot = ks.create(key, KeyType.Gcra);
      ks.setState(slot, 5_000_000, 0);
      ks.setExpireAtMs(slot, 5000);
    };
    // Synchronous, so the timer cannot run meanwhile.
    const busy = (ms: number): void => {
      const until = performance.now() + ms;
      while (performance.now() < until);
    };
    try {
      writer.switchTo(newFile(join(dir, 'a')), JOURNAL_HEADER_BYTES);
      let waited = 0;
      for (let attempt = 0; attempt < 20 && waited === 0; attempt++) {
        // A first turn, past the last write's millisecond, writes at once; a second, within its
        // millisecond (unless this machine stalled in between: then try again), leaves its record to the timer.
        busy(2);
        spend(`first-${attempt}`);
        writer.commit();
        expect(recorder.pos).toBe(0);
        const written = writer.size;
        spend(`second-${attempt}`);
        writer.commit();
        if (writer.size !== written) continue;
        waited++;
        expect(recorder.pos).toBeGreaterThan(0);
        // A later turn with nothing new of its own that ran past the millisecond: its commit writes
        // the waiting record, before its replies would leave.
        busy(2);
        writer.commit();
        expect(recorder.pos).toBe(0);
        expect(writer.size).toBeGreaterThan(written);
      }
      expect(waited).toBe(1);
    } finally {
      writer.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an everysec fsync that ends after its file was switched never counts for the newer file, even one given the same descriptor number', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-jw-'));
    const warnings: string[] = [];
    const ks = new Keyspace();
    const recorder = new JournalRecorder(ks);
    ks.journal = recorder;
    const writer = new JournalWriter(serverForWriter(warnings), recorder, { currentPath: () => dir, lostRecords: () => {}, diskTookWrites: () => {} });
    const spend = (key: string): void => {
      const slot = ks.lookup(key, 1000) === -1 ? ks.create(key, KeyType.Gcra) : ks.lookup(key, 1000);
      ks.setState(slot, 5_000_000, 0);
      ks.setExpireAtMs(slot, 5000);
      writer.commit(true);
    };
    try {
      const first = newFile(join(dir, 'a'));
      writer.switchTo(first, JOURNAL_HEADER_BYTES);
      for (let i = 0; i < 100; i++) spend(`key-${i}`);
      const firstSize = writer.size;
      expect(firstSize).toBeGreaterThan(JOURNAL_HEADER_BYTES + 100 * 10);
      // The cron starts an fsync a second after the last one; this one takes 200 ms.
      await sleep(1050);
      writer.debugFsyncDelayMs = 200;
      writer.cron();
      expect(writer.fsyncInFlight).toBe(true);
      // Meanwhile two switches: the second new file gets the first one's descriptor number back.
      writer.switchTo(newFile(join(dir, 'b')), JOURNAL_HEADER_BYTES);
      const third = newFile(join(dir, 'c'));
      writer.switchTo(third, JOURNAL_HEADER_BYTES);
      expect(third).toBe(first);
      spend('on-the-third-file');
      expect(writer.size).toBeLessThan(firstSize);
      await fsyncEnded(writer);
      // The first file's fsync said nothing about the third file: its record is still to be synced.
      expect(writer.syncedBytes).toBe(JOURNAL_HEADER_BYTES);
      writer.debugFsyncDelayMs = 0;
      await sleep(1050);
      writer.cron();
      expect(writer.fsyncInFlight).toBe(true);
      await fsyncEnded(writer);
      expect(writer.syncedBytes).toBe(writer.size);
      expect(warnings).toEqual([]);
    } finally {
      writer.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
