/**
 * The ACL file (`aclfile`, ACL LOAD / ACL SAVE): one `user <name> <rules>` line per user, as Redis
 * reads and writes it.
 */
import { FileReadError, readRegularFile, readRegularFileSync } from '../files/regular-file.js';
import { replaceFileSync } from '../persistence/exclusive-file.js';
import { AclRuleError, validUserName } from './rule-syntax.js';
import type { User } from './users.js';

/** The largest ACL file read: some 40,000 users of 200 bytes of rules each. */
export const ACL_FILE_MAX_BYTES = 8 * 1024 * 1024;

/** The ACL file's text for `users` (sorted by name): one `user <name> <rules>` line per user. */
export function aclFileText(users: readonly User[]): string {
  let out = '';
  for (const u of users) out += `user ${u.name} ${u.describe()}\n`;
  return out;
}

/** Writes the ACL file of `users` (sorted by name). */
export function saveAclFile(path: string, users: readonly User[]): void {
  // A new temp file under a random name, renamed over the file: never written through a symlink.
  replaceFileSync(path, Buffer.from(aclFileText(users), 'latin1'), 0o644, 'tmp');
}

/**
 * Parses an ACL file into new users, made by `newUser` (Redis's ACLLoadFromFile): every line must be
 * valid or nothing changes. Throws AclRuleError naming the file and line.
 */
export function parseAclFile(path: string, newUser: (name: string) => User): Map<string, User> {
  let text: string;
  try {
    // A regular file of at most ACL_FILE_MAX_BYTES: a FIFO is refused at once (never waited on),
    // /dev/zero never read, whatever is put at the path.
    text = readRegularFileSync(path, { maxBytes: ACL_FILE_MAX_BYTES, what: 'aclfile' }).toString('latin1');
  } catch (e) {
    throw new AclRuleError(`Error loading ACLs, opening file '${path}': ${readFailure(path, e)}`);
  }
  return parseAclText(path, text, newUser);
}

/** The ACL file's text, read off the event loop (ACL LOAD), with the same bounds; rejects with AclRuleError. */
export async function readAclFile(path: string): Promise<string> {
  try {
    return (await readRegularFile(path, { maxBytes: ACL_FILE_MAX_BYTES, what: 'aclfile' })).toString('latin1');
  } catch (e) {
    throw new AclRuleError(`Error loading ACLs, opening file '${path}': ${readFailure(path, e)}`);
  }
}

/** Parses the text of the ACL file at `path` (named in errors), as parseAclFile. */
export function parseAclText(path: string, text: string, newUser: (name: string) => User): Map<string, User> {
  const users = new Map<string, User>();
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = trimFileLine(lines[n]);
    if (line === '' || line.startsWith('#')) continue;
    // Words are split at spaces only, as Redis's loader: no rule or name can hold a space
    // (hasSpaces refuses them at SETUSER), so what ACL SAVE wrote splits back into the same
    // rules, whatever other bytes they hold (a tab or a quote stays inside its rule).
    const words = line.split(' ').filter((w) => w !== '');
    const where = `${path}:${n + 1}`;
    if (words[0] !== 'user' || words.length < 2) throw new AclRuleError(`${where}: line should start with user keyword`);
    const name = words[1];
    if (!validUserName(name)) throw new AclRuleError(`${where}: Usernames can't contain spaces or null characters`);
    if (users.has(name)) throw new AclRuleError(`${where}: Duplicate user '${name}' found`);
    const u = newUser(name);
    for (const r of words.slice(2)) {
      try {
        u.apply(r);
      } catch (e) {
        if (e instanceof AclRuleError) throw new AclRuleError(`${where}: ${e.message}. `);
        throw e;
      }
    }
    u.recompute();
    users.set(name, u);
  }
  return users;
}

/** A line of the ACL file without the spaces, tabs and CR/LF around it (Redis's sdstrim " \t\r\n"). */
function trimFileLine(line: string): string {
  return line.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, '');
}

/** Why the ACL file was not read, in Redis's words for the usual errors (strerror), else the reader's. */
function readFailure(path: string, e: unknown): string {
  if (!(e instanceof FileReadError)) return (e as Error).message;
  if (e.code === 'ENOENT') return 'No such file or directory';
  if (e.code === 'EACCES') return 'Permission denied';
  const prefix = `cannot read aclfile '${path}': `;
  return e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message;
}
