/**
 * CONFIG REWRITE quotes values as Redis's sdscatrepr does, byte by byte of the value's UTF-8 (or, for
 * requirepass, its own bytes), and the config file reader (sdssplitargs rules) reads `\xHH` back as
 * that byte: every value round-trips. In process over every byte and random strings (fast-check),
 * then over TCP with real restarts: CONFIG SET → CONFIG REWRITE → restart → CONFIG GET equal.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Config, quoteValue } from '../../src/config.js';
import { startServer } from '../helpers/server.js';

/** What sdscatrepr writes for one byte (sds.c): the table the quoting must follow. */
function reprOfByte(b: number): string {
  const named: Record<number, string> = { 0x22: '\\"', 0x5c: '\\\\', 0x0a: '\\n', 0x0d: '\\r', 0x09: '\\t', 0x07: '\\a', 0x08: '\\b' };
  if (named[b] !== undefined) return named[b];
  if (b >= 0x20 && b <= 0x7e) return String.fromCharCode(b);
  return `\\x${b.toString(16).padStart(2, '0')}`;
}

/** A dbfilename the server accepts: a file name, no control characters, not the reserved prefix. */
function validDbfilename(s: string): boolean {
  // eslint-disable-next-line no-control-regex
  return s !== '' && s !== '.' && s !== '..' && !/[/\\\x00-\x1f\x7f]/.test(s) && !s.startsWith('.cellgate-');
}

function withConfigFile<T>(body: (file: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-quoting-'));
  try {
    const file = join(dir, 'cellgate.conf');
    writeFileSync(file, '# quoting\n');
    return body(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Sets the values, rewrites the file, reads it into a new Config: the values it holds. */
function roundTrip(file: string, values: [string, Buffer][]): Config {
  writeFileSync(file, '# quoting\n');
  const before = new Config();
  before.loadFile(file);
  for (const [name, value] of values) before.set(name, value, true);
  before.rewrite();
  const after = new Config();
  after.loadFile(file);
  return after;
}

describe('CONFIG REWRITE quoting (sdscatrepr)', () => {
  it('writes each byte as sdscatrepr does; the multi-byte € as its three UTF-8 bytes', () => {
    for (let b = 0; b < 256; b++) {
      expect(quoteValue(Buffer.from([0x20, b])), `byte 0x${b.toString(16)}`).toBe(`" ${reprOfByte(b)}"`);
    }
    expect(quoteValue(Buffer.from('limits-€.snap', 'utf8'))).toBe('"limits-\\xe2\\x82\\xac.snap"');
    // One plain word stays bare (as cellgate always wrote numbers and names); anything else is quoted.
    expect(quoteValue(Buffer.from('cellgate.snap'))).toBe('cellgate.snap');
    expect(quoteValue(Buffer.from(''))).toBe('""');
    expect(quoteValue(Buffer.from("it's"))).toBe('"it\'s"');
  });

  it('every byte 0..255 round-trips through requirepass (bytes), alone and among others', () => {
    withConfigFile((file) => {
      for (let b = 0; b < 256; b++) {
        const value = Buffer.from([0x61, b, 0x62]);
        expect(roundTrip(file, [['requirepass', value]]).bytes('requirepass').equals(value), `byte 0x${b.toString(16)}`).toBe(true);
      }
      const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      expect(roundTrip(file, [['requirepass', all]]).bytes('requirepass').equals(all)).toBe(true);
    });
  });

  it('random bytes (requirepass) and random Unicode strings (dbfilename, tls-key-file-pass) round-trip (fast-check)', () => {
    withConfigFile((file) => {
      fc.assert(
        fc.property(
          fc.uint8Array({ minLength: 1, maxLength: 64 }),
          fc.string({ unit: 'binary', minLength: 1, maxLength: 24 }).filter(validDbfilename),
          fc.string({ unit: 'binary', maxLength: 40 }),
          (password, dbfilename, keyPass) => {
            const after = roundTrip(file, [
              ['requirepass', Buffer.from(password)],
              ['dbfilename', Buffer.from(dbfilename, 'utf8')],
              ['tls-key-file-pass', Buffer.from(keyPass, 'utf8')],
            ]);
            expect(after.bytes('requirepass').equals(Buffer.from(password))).toBe(true);
            expect(after.get('dbfilename')).toBe(dbfilename);
            expect(after.get('tls-key-file-pass')).toBe(keyPass);
            // The rewritten file is ASCII: nothing depends on how it is decoded.
            expect(readFileSync(file).every((c) => c < 0x80)).toBe(true);
          },
        ),
        { numRuns: 200 },
      );
    });
  });

  it('over TCP: CONFIG SET → CONFIG REWRITE → restart → CONFIG GET equal, and the snapshot named limits-€.snap loads', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-quoting-'));
    const data = mkdtempSync(join(tmpdir(), 'cellgate-quoting-data-'));
    const file = join(dir, 'cellgate.conf');
    writeFileSync(file, '# quoting\n');
    const password = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const cases: string[] = ['limits-€.snap', ...fc.sample(fc.string({ unit: 'binary', minLength: 1, maxLength: 16 }).filter(validDbfilename), { numRuns: 3, seed: 42 })];
    try {
      for (const dbfilename of cases) {
        const keyPass = `pass ${dbfilename} "\\'\t\n`;
        let s = await startServer({ configFile: file, args: ['--dir', data, '--save', ''] });
        let c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0, enableReadyCheck: false });
        try {
          await c.connect();
          if (dbfilename !== cases[0]) await c.call('AUTH', password);
          expect(await c.call('CONFIG', 'SET', 'dbfilename', dbfilename, 'tls-key-file-pass', keyPass, 'requirepass', password)).toBe('OK');
          await c.call('AUTH', password);
          await c.call('CL.THROTTLE', 'kept', 5, 10, 3600);
          expect(await c.call('SAVE')).toBe('OK');
          expect(await c.call('CONFIG', 'REWRITE')).toBe('OK');
        } finally {
          c.disconnect();
          await s.stop('SIGKILL');
        }
        s = await startServer({ configFile: file, args: ['--dir', data, '--save', ''] });
        c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0, enableReadyCheck: false });
        try {
          await c.connect();
          await c.call('AUTH', password);
          expect(await c.call('CONFIG', 'GET', 'dbfilename')).toEqual(['dbfilename', dbfilename]);
          expect(await c.call('CONFIG', 'GET', 'tls-key-file-pass')).toEqual(['tls-key-file-pass', keyPass]);
          const [, got] = (await c.callBuffer('CONFIG', 'GET', 'requirepass')) as Buffer[];
          expect(got.equals(password)).toBe(true);
          // The restart read the snapshot under its non-ASCII name, not an empty keyspace.
          expect(await c.exists('kept')).toBe(1);
        } finally {
          c.disconnect();
          await s.stop('SIGKILL');
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(data, { recursive: true, force: true });
    }
  });
});
