/**
 * A snapshot that cannot be trusted stops the start: the message names the file, the byte offset and
 * the problem, the exit code is 1, and the file is left byte for byte as it was. `check` reports the
 * same problems, and on a valid file prints its key counts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { runToExit, startOn, tempDir, T0_AHEAD_MS } from './helpers.js';

let dir: string;
let good: Buffer;
const T0 = T0_AHEAD_MS;

beforeAll(async () => {
  dir = tempDir();
  const s = await startOn(dir);
  const r = new Redis(s.port);
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  for (let i = 0; i < 20; i++) await r.call('CL.THROTTLE', `user:${i}`, 5, 10, 60);
  await r.call('GCRA', 'g', 5, 10, 60);
  await r.save();
  r.disconnect();
  await s.stop('SIGKILL');
  good = readFileSync(join(dir, 'cellgate.snap'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Writes `bytes` as the snapshot of a fresh dir, starts a server on it, returns the result and the file afterwards. */
function startWith(bytes: Buffer): { status: number | null; stderr: string; file: string; after: Buffer } {
  const d = tempDir();
  const file = join(d, 'cellgate.snap');
  writeFileSync(file, bytes);
  const r = runToExit(['--port', '0', '--bind', '127.0.0.1', '--dir', d]);
  const after = readFileSync(file);
  rmSync(d, { recursive: true, force: true });
  return { status: r.status, stderr: r.stderr, file, after };
}

describe('refusing a bad snapshot', () => {
  it('check validates a good file and prints key counts per type', () => {
    const r = runToExit(['check', join(dir, 'cellgate.snap')]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`${join(dir, 'cellgate.snap')}: valid cellgate snapshot, format version 2\n`);
    expect(r.stdout).toContain('\nkeys: 21\n');
    expect(r.stdout).toContain('\nkeys_gcra: 21\n');
    expect(r.stdout).toContain(`\nbytes: ${good.length}\n`);
    expect(r.stdout).toContain(`\ncreated: ${new Date(T0).toISOString()}\n`);
  });

  it('check exits 1 on a missing file', () => {
    const r = runToExit(['check', join(dir, 'nope.snap')]);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(`cellgate: cannot read snapshot ${join(dir, 'nope.snap')}: ENOENT\n`);
  });

  const cases: [string, () => Buffer, () => RegExp][] = [
    ['empty file', () => Buffer.alloc(0), () => /not a cellgate snapshot .* at byte offset 0/],
    ['foreign file (an RDB)', () => Buffer.from('REDIS0011\xfa\x09redis-ver\x057.2.4', 'latin1'), () => /not a cellgate snapshot .* at byte offset 0/],
    ['wrong format version', () => { const b = Buffer.from(good); b.writeUInt32LE(3, 8); return b; }, () => /unsupported format version 3 \(this build reads versions 1 to 2\) at byte offset 8/],
    ['truncated inside the header', () => good.subarray(0, 20), () => /truncated: the file ends inside the 24-byte header at byte offset 20/],
    ['truncated inside an entry', () => good.subarray(0, 24 + 30), () => /truncated or corrupt: entry 0 .* runs past the end of the file \(54 bytes\) at byte offset 30/],
    ['truncated before the footer', () => good.subarray(0, good.length - 13), () => new RegExp(`truncated: the file ends after 21 entries, without the footer at byte offset ${good.length - 13}`)],
    ['truncated inside the footer', () => good.subarray(0, good.length - 2), () => new RegExp(`truncated: the file ends inside the 13-byte footer at byte offset ${good.length - 13}`)],
    ['a flipped bit in a state number', () => { const b = Buffer.from(good); b[good.length - 40] ^= 0x01; return b; }, () => new RegExp(`checksum mismatch: stored CRC-32 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8} \\(the file is corrupt\\) at byte offset ${good.length - 4}`)],
    ['a flipped byte in a type', () => { const b = Buffer.from(good); b[24] = 0x77; return b; }, () => /corrupt entry 0: unknown key type 119 at byte offset 24/],
    ['garbage after the footer', () => Buffer.concat([good, Buffer.from('x')]), () => new RegExp(`corrupt: 1 unexpected bytes after the footer at byte offset ${good.length}`)],
  ];

  for (const [name, make, message] of cases) {
    it(`refuses to start on: ${name}, leaving the file untouched`, () => {
      const bytes = make();
      const r = startWith(bytes);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/^cellgate: snapshot \S+cellgate\.snap: /);
      expect(r.stderr).toContain(r.file);
      expect(r.stderr).toMatch(message());
      expect(r.stderr).toMatch(/; refusing to start \(the file is left untouched\)\n$/);
      expect(r.after.equals(bytes)).toBe(true);
      // check says the same, exit 1.
      const d = tempDir();
      writeFileSync(join(d, 'x.snap'), bytes);
      const c = runToExit(['check', join(d, 'x.snap')]);
      rmSync(d, { recursive: true, force: true });
      expect(c.status).toBe(1);
      expect(c.stderr).toMatch(message());
    });
  }

  it('every single-byte truncation and every flipped byte is refused (never loaded half)', async () => {
    // Exhaustive in-process over this small file: the reader must throw for each damaged copy.
    const { parseSnapshot, SnapshotError } = await import('../../src/persistence/reader.js');
    for (let len = 0; len < good.length; len++) {
      expect(() => parseSnapshot(good.subarray(0, len), 'f', () => {}), `length ${len}`).toThrow(SnapshotError);
    }
    for (let i = 0; i < good.length; i++) {
      const b = Buffer.from(good);
      b[i] ^= 0xa5;
      expect(() => parseSnapshot(b, 'f', () => {}), `byte ${i}`).toThrow(SnapshotError);
    }
  });
});
