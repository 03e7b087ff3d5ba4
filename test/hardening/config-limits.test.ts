/**
 * Configuration sanity over TCP: requirepass is bytes end to end (CONFIG SET, the config file,
 * requirepass-file, AUTH, HELLO AUTH), Redis's minimums for proto-max-bulk-len and
 * client-query-buffer-limit, and a client-output-buffer-limit that would cut off every client (the
 * one setting it included) is refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '../helpers/server.js';
import { Checker } from '../helpers/raw.js';

const WRONGPASS = 'WRONGPASS invalid username-password pair or user is disabled.';
const PASS = Buffer.from([0xff, 0xfe]);
/** What the old code stored for it: the bytes decoded as UTF-8 (two U+FFFD), encoded again. */
const REPLACED = Buffer.from('\ufffd\ufffd', 'utf8');

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'cellgate-cfg-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function authWorks(port: number, expectOk: Buffer, expectWrong: Buffer[]): Promise<void> {
  for (const wrong of expectWrong) {
    const c = await Checker.open(port);
    try {
      expect(await c.call('AUTH', wrong)).toEqual({ error: WRONGPASS });
      expect(await c.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
    } finally {
      c.close();
    }
  }
  const c = await Checker.open(port);
  try {
    expect(await c.call('AUTH', expectOk)).toBe('OK');
    expect(await c.call('PING')).toBe('PONG');
    expect(await c.call('AUTH', 'default', expectOk)).toBe('OK');
  } finally {
    c.close();
  }
  const h = await Checker.open(port);
  try {
    const hello = await h.call('HELLO', '2', 'AUTH', 'default', expectOk);
    expect(Array.isArray(hello)).toBe(true);
    expect(await h.call('PING')).toBe('PONG');
  } finally {
    h.close();
  }
}

describe('requirepass as bytes', () => {
  it('CONFIG SET requirepass "\\xff\\xfe", then AUTH and HELLO AUTH with those bytes succeed and others fail', async () => {
    const s = await startServer();
    const admin = await Checker.open(s.port);
    try {
      expect(await admin.call('CONFIG', 'SET', 'requirepass', PASS)).toBe('OK');
      // The reply is the bytes set (the helper reads bulk strings as latin1: one char per byte).
      expect(await admin.call('CONFIG', 'GET', 'requirepass')).toEqual(['requirepass', PASS.toString('latin1')]);
      await authWorks(s.port, PASS, [REPLACED, Buffer.from([0xff]), Buffer.from([0xff, 0xfe, 0x00])]);
    } finally {
      admin.close();
      await s.stop();
    }
  });

  it('from requirepass-file and from a config file ("\\xff\\xfe" quoted), the same bytes', async () => {
    const file = join(dir, 'secret');
    writeFileSync(file, Buffer.concat([PASS, Buffer.from('\n')]));
    const a = await startServer({ args: ['--requirepass-file', file] });
    try {
      await authWorks(a.port, PASS, [REPLACED]);
    } finally {
      await a.stop();
    }
    const conf = join(dir, 'cellgate.conf');
    writeFileSync(conf, 'requirepass "\\xff\\xfe"\n');
    const b = await startServer({ configFile: conf });
    try {
      await authWorks(b.port, PASS, [REPLACED]);
    } finally {
      await b.stop();
    }
  });

  it('a UTF-8 password from a flag is its UTF-8 bytes', async () => {
    const s = await startServer({ args: ['--requirepass', 'pässwörd'] });
    try {
      await authWorks(s.port, Buffer.from('pässwörd', 'utf8'), [Buffer.from('pässwörd', 'latin1')]);
    } finally {
      await s.stop();
    }
  });
});

describe('size limits', () => {
  it('proto-max-bulk-len and client-query-buffer-limit below 1 MiB are refused with Redis\'s error', async () => {
    const s = await startServer();
    const c = await Checker.open(s.port);
    try {
      for (const name of ['proto-max-bulk-len', 'client-query-buffer-limit']) {
        const before = await c.call('CONFIG', 'GET', name);
        for (const v of ['1', '1048575', '1000kb']) {
          expect(await c.call('CONFIG', 'SET', name, v)).toEqual({
            error: `ERR CONFIG SET failed (possibly related to argument '${name}') - argument must be between 1048576 and 9223372036854775807 inclusive`,
          });
        }
        expect(await c.call('CONFIG', 'GET', name)).toEqual(before);
        expect(await c.call('CONFIG', 'SET', name, '1mb')).toBe('OK');
        expect(await c.call('CONFIG', 'GET', name)).toEqual([name, '1048576']);
      }
      expect(await c.call('PING')).toBe('PONG');
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('client-output-buffer-limit "normal 1 1 1" is refused; the client keeps working and can set sane values', async () => {
    const s = await startServer();
    const c = await Checker.open(s.port);
    try {
      const before = await c.call('CONFIG', 'GET', 'client-output-buffer-limit');
      for (const v of ['normal 1 1 1', 'normal 16383 0 0', 'normal 0 1kb 5']) {
        const r = (await c.call('CONFIG', 'SET', 'client-output-buffer-limit', v)) as { error: string };
        expect(r.error).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'client-output-buffer-limit'\) - .*at least 16384 bytes/);
      }
      expect(await c.call('CONFIG', 'GET', 'client-output-buffer-limit')).toEqual(before);
      expect(await c.call('PING')).toBe('PONG');
      // The smallest accepted limit still lets the client that set it send CONFIG SET and INFO.
      expect(await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'normal 16kb 16kb 1')).toBe('OK');
      expect(String(await c.call('INFO', 'server'))).toContain('redis_version:');
      expect(await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'normal 256mb 64mb 60')).toBe('OK');
      expect(await c.call('PING')).toBe('PONG');
      expect((await c.call('CONFIG', 'SET', 'client-output-buffer-limit', 'normal 0 0 0'))).toBe('OK');
    } finally {
      c.close();
      await s.stop();
    }
  });
});
