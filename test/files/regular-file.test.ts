/**
 * The bounded reader of files someone else controls (src/files/regular-file.ts): regular files of
 * at most the bound are read; FIFOs, devices, directories, symlink loops and oversized files are
 * refused with a reason, and nothing blocks (a FIFO without a writer is refused at once).
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FileReadError, openRegularFileSync, readRegularFile, readRegularFileSync, readWholeRegularFile, readWholeRegularFileSync } from '../../src/files/regular-file.js';

const dir = mkdtempSync(join(tmpdir(), 'cellgate-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const limits = { maxBytes: 1000, what: 'test file' };

async function refusal(path: string): Promise<FileReadError> {
  const e = await readRegularFile(path, limits).then(() => null, (err: unknown) => err);
  expect(e).toBeInstanceOf(FileReadError);
  let syncError: unknown = null;
  try {
    readRegularFileSync(path, limits);
  } catch (err) {
    syncError = err;
  }
  expect(syncError).toBeInstanceOf(FileReadError);
  expect((syncError as FileReadError).code).toBe((e as FileReadError).code);
  return e as FileReadError;
}

describe('readRegularFile', () => {
  it('reads a regular file, through a symlink too, and a file of exactly the bound', async () => {
    const file = join(dir, 'a.yaml');
    writeFileSync(file, 'domain: x\n');
    symlinkSync(file, join(dir, 'link.yaml'));
    expect((await readRegularFile(join(dir, 'link.yaml'), limits)).toString()).toBe('domain: x\n');
    const full = join(dir, 'full');
    writeFileSync(full, Buffer.alloc(1000, 0x61));
    expect((await readRegularFile(full, limits)).length).toBe(1000);
    expect(readRegularFileSync(full, limits).length).toBe(1000);
    const empty = join(dir, 'empty');
    writeFileSync(empty, '');
    expect((await readRegularFile(empty, limits)).length).toBe(0);
  });

  it('refuses a file one byte over the bound, naming the bound', async () => {
    const big = join(dir, 'big');
    writeFileSync(big, Buffer.alloc(1001));
    const e = await refusal(big);
    expect(e.code).toBe('TOO_BIG');
    expect(e.message).toContain('larger than 1000 bytes');
  });

  it('refuses a FIFO at once, without waiting for a writer', async () => {
    const fifo = join(dir, 'fifo.yaml');
    execFileSync('mkfifo', [fifo]);
    const e = await refusal(fifo);
    expect(e.code).toBe('NOT_REGULAR');
    expect(e.message).toContain('a FIFO');
  });

  it('refuses /dev/zero behind a symlink, a directory and a symlink loop', async () => {
    symlinkSync('/dev/zero', join(dir, 'zero.yaml'));
    expect((await refusal(join(dir, 'zero.yaml'))).message).toContain('a character device');
    expect((await refusal(dir)).message).toContain('a directory');
    symlinkSync(join(dir, 'loop2'), join(dir, 'loop1'));
    symlinkSync(join(dir, 'loop1'), join(dir, 'loop2'));
    const loop = await refusal(join(dir, 'loop1'));
    expect(loop.code).toBe('ELOOP');
    expect(loop.message).toContain('too many levels of symbolic links');
    expect((await refusal(join(dir, 'absent'))).code).toBe('ENOENT');
  });
});

describe('readWholeRegularFile and openRegularFileSync (snapshots and journal files)', () => {
  async function wholeRefusal(path: string): Promise<FileReadError> {
    const e = await readWholeRegularFile(path, limits).then(() => null, (err: unknown) => err);
    expect(e).toBeInstanceOf(FileReadError);
    for (const sync of [() => readWholeRegularFileSync(path, limits), () => openRegularFileSync(path, limits)]) {
      let syncError: unknown = null;
      try {
        sync();
      } catch (err) {
        syncError = err;
      }
      expect(syncError).toBeInstanceOf(FileReadError);
      expect((syncError as FileReadError).code).toBe((e as FileReadError).code);
    }
    return e as FileReadError;
  }

  it('reads a regular file whole, of exactly the bound too, into one buffer of its size', async () => {
    const full = join(dir, 'whole');
    writeFileSync(full, Buffer.alloc(1000, 0x62));
    expect((await readWholeRegularFile(full, limits)).equals(Buffer.alloc(1000, 0x62))).toBe(true);
    expect(readWholeRegularFileSync(full, limits).length).toBe(1000);
    const { fd, size } = openRegularFileSync(full, limits);
    closeSync(fd);
    expect(size).toBe(1000);
  });

  it('refuses a FIFO at once, /dev/zero behind a symlink, a directory and a file over the bound', async () => {
    const fifo = join(dir, 'whole-fifo');
    execFileSync('mkfifo', [fifo]);
    expect((await wholeRefusal(fifo)).message).toBe(`cannot read test file '${fifo}': it is a FIFO, only regular files are read`);
    const zero = join(dir, 'whole-zero');
    symlinkSync('/dev/zero', zero);
    expect((await wholeRefusal(zero)).message).toContain('it is a character device');
    expect((await wholeRefusal(dir)).code).toBe('NOT_REGULAR');
    const big = join(dir, 'whole-big');
    writeFileSync(big, Buffer.alloc(1001));
    expect((await wholeRefusal(big)).code).toBe('TOO_BIG');
    expect((await wholeRefusal(join(dir, 'missing'))).code).toBe('ENOENT');
  });
});
