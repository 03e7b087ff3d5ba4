/**
 * The ACL check of a command (every command of a user that is not `unrestricted`): may this user
 * run this command on these keys? And Redis's NOPERM texts for a refusal.
 */
import { constants } from 'node:buffer';
import type { CommandSpec } from '../commands/types.js';
import type { CommandArgs } from '../protocol/command-args.js';
import { keyAllowed } from './key-patterns.js';
import type { User } from './users.js';

export const ACL_OK = 0;
export const ACL_DENIED_CMD = 1;
export const ACL_DENIED_KEY = 2;

/** The argument index of the key refused by the last aclCheck() that returned ACL_DENIED_KEY. */
export let deniedKeyIndex = -1;

/**
 * Whether `user` may run `spec` with `argv` (its name at argument `base`: 0, or 3 for ACL DRYRUN).
 * Called only for users that are not `unrestricted`; allocates nothing unless key patterns apply.
 */
export function aclCheck(user: User, spec: CommandSpec, argv: CommandArgs, base: number): number {
  if (user.allowed[spec.id!] === 0) return ACL_DENIED_CMD;
  if (user.allKeys) return ACL_OK;
  const need = spec.aclKeyAccess!;
  if (spec.forEachKey !== undefined) {
    let result = ACL_OK;
    spec.forEachKey(argv, base, (i) => {
      if (keyArgAllowed(user, argv, i, need)) return true;
      deniedKeyIndex = i;
      result = ACL_DENIED_KEY;
      return false;
    });
    return result;
  }
  if (spec.firstKey <= 0) return ACL_OK;
  const argc = argv.length - base;
  const last = spec.lastKey < 0 ? argc + spec.lastKey : Math.min(spec.lastKey, argc - 1);
  for (let i = spec.firstKey; i <= last; i += spec.keyStep || 1) {
    if (!keyArgAllowed(user, argv, base + i, need)) {
      deniedKeyIndex = base + i;
      return ACL_DENIED_KEY;
    }
  }
  return ACL_OK;
}

/**
 * Whether the key at argument `i` matches one of `user`'s patterns with access `need`. A key too long
 * to become a JS string (V8 stops just under 512 MiB, proto-max-bulk-len's default) cannot be matched
 * and is refused, rather than the conversion throwing.
 */
function keyArgAllowed(user: User, argv: CommandArgs, i: number, need: number): boolean {
  if (argv.byteLength(i) > constants.MAX_STRING_LENGTH) return false;
  return keyAllowed(user.keyMatchers, argv.source(i), argv.start(i), argv.end(i), need);
}

/** Redis 7.2's NOPERM texts (getAclErrorMessage, not verbose). */
export function noPermMessage(result: number, user: User, fullName: string): string {
  return result === ACL_DENIED_CMD
    ? `NOPERM User ${user.name} has no permissions to run the '${fullName}' command`
    : 'NOPERM No permissions to access a key';
}
