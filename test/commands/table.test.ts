/**
 * What the command table derives from each command's declared flags, which the dispatcher, the
 * ACL and the slow log read instead of command names: the trait bits, the keys' flags and the
 * access they need, the maximum arity, and the secret arguments.
 */
import { describe, expect, it } from 'vitest';
import { allCommands, lookupCommand, lookupSubcommand } from '../../src/commands/table.js';
import { commandArgs as args } from '../helpers/command-args.js';
import {
  TRAIT_DENYOOM, TRAIT_LEAVES_MULTI, TRAIT_NO_AUTH, TRAIT_NO_MULTI, TRAIT_RUNS_IN_MULTI, TRAIT_RUNS_QUEUE, TRAIT_SKIP_SLOWLOG,
  type CommandSpec,
} from '../../src/commands/types.js';
import { KEY_READ, KEY_WRITE } from '../../src/acl/users.js';

function every(): CommandSpec[] {
  return allCommands().flatMap((c) => [c, ...(c.subcommands ?? [])]);
}

function namesWith(trait: number): string[] {
  return every().filter((s) => (s.traits! & trait) !== 0).map((s) => s.fullName ?? s.name).sort();
}

function redacted(spec: CommandSpec, ...values: string[]): string {
  const argv = args(...values);
  return values.map((v, i) => (i > 0 && spec.secretArg?.(argv, i) ? '(redacted)' : v)).join(' ');
}

describe('command table', () => {
  it('gives the dispatcher its traits from flags, never from names', () => {
    expect(namesWith(TRAIT_RUNS_IN_MULTI)).toEqual(['discard', 'exec', 'multi', 'quit', 'reset', 'watch']);
    expect(namesWith(TRAIT_LEAVES_MULTI)).toEqual(['discard', 'exec', 'quit', 'reset']);
    expect(namesWith(TRAIT_RUNS_QUEUE)).toEqual(['exec']);
    // Subcommands named like top-level commands (SLOWLOG RESET) are not them.
    expect(lookupSubcommand(lookupCommand('slowlog')!, 'reset')!.traits! & TRAIT_RUNS_IN_MULTI).toBe(0);
    for (const s of every()) {
      expect((s.traits! & TRAIT_NO_AUTH) !== 0).toBe(s.flags.includes('no-auth'));
      expect((s.traits! & TRAIT_DENYOOM) !== 0).toBe(s.flags.includes('denyoom'));
      expect((s.traits! & TRAIT_NO_MULTI) !== 0).toBe(s.flags.includes('no-multi'));
      expect((s.traits! & TRAIT_SKIP_SLOWLOG) !== 0).toBe(s.flags.includes('skip_slowlog'));
    }
  });

  it('derives the ACL key access from the key specs: DEL and UNLINK only delete', () => {
    expect(lookupCommand('del')!.keyFlags).toEqual(['RM', 'delete']);
    expect(lookupCommand('del')!.aclKeyAccess).toBe(KEY_WRITE);
    expect(lookupCommand('unlink')!.aclKeyAccess).toBe(KEY_WRITE);
    expect(lookupCommand('cl.throttle')!.keyFlags).toEqual(['RW', 'access', 'update']);
    expect(lookupCommand('cl.throttle')!.aclKeyAccess).toBe(KEY_READ | KEY_WRITE);
    expect(lookupCommand('exists')!.keyFlags).toEqual(['RO', 'access']);
    expect(lookupCommand('exists')!.aclKeyAccess).toBe(KEY_READ);
  });

  it('bounds the arguments of the commands that take at most a few', () => {
    expect(lookupCommand('ping')!.maxArity).toBe(2);
    expect(lookupCommand('cl.throttle')!.maxArity).toBe(6);
    expect(lookupCommand('gcra')!.maxArity).toBe(7);
    for (const s of every()) if (s.maxArity !== undefined) expect(s.arity).toBeLessThan(0);
  });

  it('compiles each command\'s redaction rule into the slow log\'s secret test', () => {
    const hello = lookupCommand('hello')!;
    expect(redacted(hello, 'HELLO', '3', 'AUTH', 'u', 'p', 'SETNAME', 'n')).toBe('HELLO 3 AUTH (redacted) (redacted) SETNAME n');
    expect(redacted(hello, 'HELLO', '3', 'SETNAME', 'n', 'auth', 'u', 'p')).toBe('HELLO 3 SETNAME n auth (redacted) (redacted)');
    // An unknown option ends the list (HELLO refuses it): nothing after it is taken for a secret.
    expect(redacted(hello, 'HELLO', '3', 'constructor', 'AUTH', 'u', 'p')).toBe('HELLO 3 constructor AUTH u p');
    expect(redacted(hello, 'HELLO', '3', 'AUTH', 'u')).toBe('HELLO 3 AUTH u');
    expect(redacted(lookupCommand('auth')!, 'AUTH', 'u', 'p')).toBe('AUTH (redacted) (redacted)');
    const acl = lookupCommand('acl')!;
    expect(redacted(lookupSubcommand(acl, 'setuser')!, 'ACL', 'SETUSER', 'u', '>p')).toBe('ACL SETUSER (redacted) (redacted)');
    const configSet = lookupSubcommand(lookupCommand('config')!, 'set')!;
    expect(redacted(configSet, 'CONFIG', 'SET', 'requirepass', 'p', 'hz', '10', 'backend', 'redis://x'))
      .toBe('CONFIG SET requirepass (redacted) hz 10 backend (redacted)');
    expect(redacted(lookupCommand('ping')!, 'PING', 'p')).toBe('PING p');
  });
});

describe("the table's specs", () => {
  // The dispatcher reads the same fields of every command; one shape keeps those reads monomorphic
  // (uniform() in src/commands/table.ts).
  it('all have the same fields in the same order', () => {
    const specs = every();
    const first = Object.keys(specs[0]!).join(',');
    expect(specs.length).toBeGreaterThan(50);
    for (const s of specs) expect(`${s.fullName ?? s.name}: ${Object.keys(s).join(',')}`).toBe(`${s.fullName ?? s.name}: ${first}`);
  });
});
