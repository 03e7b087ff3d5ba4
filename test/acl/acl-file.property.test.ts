/**
 * ACL SAVE / ACL LOAD / restart keep every user as it was, whatever bytes its name, passwords and
 * patterns hold (docs/security.md "ACL users"): a name or a key or channel pattern with a space, tab, CR,
 * LF, VT, FF or NUL is refused at SETUSER with Redis's error (so every rule is one word of the file);
 * anything else (quotes, backslashes, `#`, `~`, bytes 0x80-0xFF, 0xA0 included) round-trips. Before,
 * a pattern holding a newline wrote a second `user` line into the file (a passwordless +@all user
 * after a restart) and one holding a space made the file unloadable.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, type Reply } from '../helpers/raw.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const dir = mkdtempSync(join(tmpdir(), 'cellgate-aclfile-'));
const aclfile = join(dir, 'users.acl');
let server: RunningServer;
let admin: Checker;

async function start(): Promise<void> {
  server = await startServer({ args: ['--aclfile', aclfile] });
  admin = await Checker.open(server.port);
}

beforeAll(async () => {
  // The aclfile must exist for the server to start with it: an empty one.
  const { writeFileSync } = await import('node:fs');
  writeFileSync(aclfile, '');
  await start();
});
afterAll(async () => {
  admin?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const latin1 = (s: string): Buffer => Buffer.from(s, 'latin1');
/** An error reply's text: CR and LF become spaces (Redis's addReplyError keeps the protocol intact). */
const oneLine = (s: string): string => s.replace(/[\r\n]/g, ' ');
/** Redis's ACLStringHasSpaces: isspace() in the C locale, or NUL. */
const hasSpaces = (s: string): boolean => /[ \t\n\v\f\r\0]/.test(s);

/** Short byte strings, mostly of the bytes that matter to the file's syntax. */
const SPECIAL = [0x0a, 0x20, 0x22, 0x27, 0x00, 0xff, 0x80, 0xa0, 0x85, 0x09, 0x0b, 0x0c, 0x0d, 0x5c, 0x23, 0x7e, 0x25, 0x26, 0x2b, 0x2d, 0x3e, 0x3c, 0x28, 0x29, 0x61, 0x2a, 0x3f];
const bytes = fc
  .array(fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...SPECIAL) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 255 }) }), { minLength: 1, maxLength: 10 })
  .map((a) => Buffer.from(a).toString('latin1'));

interface Sample {
  name: string;
  password: string;
  keyPattern: string;
  readPattern: string;
  channel: string;
}

/** The sample without the bytes SETUSER refuses in names and patterns (the password keeps them). */
function clean(s: Sample): Sample {
  const strip = (t: string): string => t.replace(/[ \t\n\v\f\r\0]/g, '') || 'x';
  return { name: strip(s.name), password: s.password, keyPattern: strip(s.keyPattern), readPattern: strip(s.readPattern), channel: strip(s.channel) };
}

async function getuser(name: string): Promise<Reply> {
  return admin.call('ACL', 'GETUSER', latin1(name));
}

describe('ACL SAVE and LOAD round-trip every byte, or SETUSER refuses it as Redis', () => {
  it('newline, space and NUL in patterns are refused at SETUSER; the file cannot gain a user', async () => {
    const evil = 'a\nuser root on nopass ~* &* +@all';
    expect(await admin.call('ACL', 'SETUSER', 'evil', 'on', 'nopass', `~${evil}`)).toEqual({ error: `ERR Error in ACL SETUSER modifier '~${oneLine(evil)}': Syntax error` });
    expect(await admin.call('ACL', 'SETUSER', 'evil', 'on', 'nopass', '%R~a b')).toEqual({ error: "ERR Error in ACL SETUSER modifier '%R~a b': Syntax error" });
    expect(await admin.call('ACL', 'SETUSER', 'evil', 'on', 'nopass', '&a\0b')).toEqual({ error: "ERR Error in ACL SETUSER modifier '&a\0b': Syntax error" });
    expect(await admin.call('ACL', 'SETUSER', 'ev il', 'on')).toEqual({ error: "ERR Usernames can't contain spaces or null characters" });
    expect(await admin.call('ACL', 'SETUSER', 'ev\til', 'on')).toEqual({ error: "ERR Usernames can't contain spaces or null characters" });
    expect(await admin.call('ACL', 'USERS')).toEqual(['default']);
    expect(await admin.call('ACL', 'SAVE')).toBe('OK');
    expect(readFileSync(aclfile, 'latin1')).toBe('user default on nopass ~* &* +@all\n');
  });

  it('random names, passwords and patterns: refused exactly when Redis refuses, else the same after SAVE+LOAD', async () => {
    const kept = new Map<string, Reply>();
    let tried = 0;
    await fc.assert(
      // Most samples are cleaned of the refused bytes, so that most of them reach the round trip.
      fc.asyncProperty(fc.record({ name: bytes, password: bytes, keyPattern: bytes, readPattern: bytes, channel: bytes }), fc.integer({ min: 0, max: 9 }), async (raw: Sample, dirt: number) => {
        const s = dirt < 3 ? raw : clean(raw);
        tried++;
        // `~*` and `&*` alone mean allkeys/allchannels, after which another pattern is refused: not the subject here.
        const key = s.keyPattern === '*' ? '**' : s.keyPattern;
        const channel = s.channel === '*' ? '**' : s.channel;
        const rules = ['on', `>${s.password}`, `~${key}`, `%R~${s.readPattern}`, `&${channel}`, '+@limiter', '-cl.throttle'];
        const reply = await admin.call('ACL', 'SETUSER', latin1(s.name), ...rules.map(latin1));
        if (hasSpaces(s.name)) {
          expect(reply).toEqual({ error: "ERR Usernames can't contain spaces or null characters" });
          return;
        }
        const bad = [`~${key}`, `%R~${s.readPattern}`, `&${channel}`].find((r) => hasSpaces(r));
        if (bad !== undefined) {
          expect(reply).toEqual({ error: `ERR Error in ACL SETUSER modifier '${oneLine(bad)}': Syntax error` });
          return;
        }
        expect(reply).toBe('OK');
        const before = await getuser(s.name);
        expect(await admin.call('ACL', 'SAVE')).toBe('OK');
        expect(await admin.call('ACL', 'LOAD')).toBe('OK');
        expect(await getuser(s.name)).toEqual(before);
        // The file holds one line per user: no rule spilled into a line of its own.
        const lines = readFileSync(aclfile, 'latin1').split('\n').filter((l) => l !== '');
        expect(lines.every((l) => l.startsWith('user '))).toBe(true);
        expect(lines.length).toBe(((await admin.call('ACL', 'USERS')) as Reply[]).length);
        kept.set(s.name, before);
      }),
      { numRuns: SOAK ? 1000 : 150 },
    );
    console.log(`[acl-file] ${tried} samples, ${kept.size} users round-tripped, the others refused`);
    expect(kept.size).toBeGreaterThan(tried / 3);
    // And a restart loads the same users from the file.
    expect(await admin.call('ACL', 'SAVE')).toBe('OK');
    const list = await admin.call('ACL', 'LIST');
    admin.close();
    await server.stop();
    await start();
    expect(await admin.call('ACL', 'LIST')).toEqual(list);
    for (const [name, user] of kept) expect(await getuser(name)).toEqual(user);
  }, 120_000);
});
