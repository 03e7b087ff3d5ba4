/**
 * ACL users, as Redis 7: rules (`on`, `>pass`, `+@limiter`, `~key*`, ...), the rule strings ACL LIST
 * prints, the ACL file format and the ACL log. Every rule string is handled as bytes (latin1, one
 * char per byte), like Redis's sds strings.
 *
 * What execute() reads per command is precomputed here: `unrestricted` (every command, every key:
 * the default user costs that one test), `allowed` (one byte per command id) and `allKeys`.
 */
import { constants } from 'node:buffer';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CommandSpec } from '../commands/types.js';
import type { CommandArgs } from '../protocol/command-args.js';
import { globMatch } from '../glob.js';
import { replaceFileSync } from '../persistence/exclusive-file.js';
import { isCategory } from './categories.js';
import { loggedText } from '../log-text.js';

/** Key access a pattern grants: bit 1 read, bit 2 write. */
export const KEY_READ = 1;
export const KEY_WRITE = 2;

export class AclRuleError extends Error {}

export class User {
  enabled = false;
  nopass = false;
  /** SHA-256 hex digests, in the order they were added. */
  passwords: string[] = [];
  /** Every command allowed before `rules` apply (+@all) or none (-@all). */
  allCommandsBase = false;
  /** Command rules after the base, as given (`+@limiter`, `-flushall`), each at most once. */
  rules: string[] = [];
  allKeys = false;
  /** Pattern → access bits, in the order added (a Map: 100k patterns must not cost a scan each). */
  keys = new Map<string, number>();
  allChannels = false;
  channels = new Set<string>();
  /** One byte per command id: 1 = allowed. */
  allowed: Uint8Array;
  /** Every command allowed and every key: execute() skips all checks. */
  unrestricted = false;
  /** `keys` as aclCheck reads them (built by recompute()). */
  private keyMatchers: KeyMatcher[] = [];
  /** `passwords` as AUTH compares them, 32-byte digests (built by recompute()). */
  private passwordDigests: Buffer[] = [];

  constructor(
    readonly name: string,
    private readonly acl: Acl,
  ) {
    this.allowed = new Uint8Array(acl.commandCount);
    this.recompute();
  }

  copy(): User {
    const u = new User(this.name, this.acl);
    u.enabled = this.enabled;
    u.nopass = this.nopass;
    u.passwords = [...this.passwords];
    u.allCommandsBase = this.allCommandsBase;
    u.rules = [...this.rules];
    u.allKeys = this.allKeys;
    u.keys = new Map(this.keys);
    u.allChannels = this.allChannels;
    u.channels = new Set(this.channels);
    u.recompute();
    return u;
  }

  /** Takes every field of `other` (a copy that was changed successfully). */
  assign(other: User): void {
    this.enabled = other.enabled;
    this.nopass = other.nopass;
    this.passwords = other.passwords;
    this.allCommandsBase = other.allCommandsBase;
    this.rules = other.rules;
    this.allKeys = other.allKeys;
    this.keys = other.keys;
    this.allChannels = other.allChannels;
    this.channels = other.channels;
    this.recompute();
  }

  /**
   * Applies one rule (Redis's ACLSetUser); throws AclRuleError with Redis's reason. recompute()
   * must follow the last one (once per SETUSER, not per rule: a 1 MiB SETUSER has 100k rules).
   */
  apply(rule: string): void {
    const lower = rule.toLowerCase();
    if (lower === 'on') this.enabled = true;
    else if (lower === 'off') this.enabled = false;
    else if (lower === 'nopass') {
      this.nopass = true;
      this.passwords = [];
    } else if (lower === 'resetpass') {
      this.nopass = false;
      this.passwords = [];
    } else if (rule.startsWith('>') || rule.startsWith('<')) {
      const hash = sha256Hex(Buffer.from(rule.slice(1), 'latin1'));
      this.changePassword(rule[0] === '>', hash);
    } else if (rule.startsWith('#') || rule.startsWith('!')) {
      const hash = rule.slice(1);
      if (!/^[0-9a-f]{64}$/.test(hash)) throw new AclRuleError('The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters');
      this.changePassword(rule[0] === '#', hash);
    } else if (lower === 'allkeys' || rule === '~*') {
      this.allKeys = true;
      this.keys = new Map([['*', KEY_READ | KEY_WRITE]]);
    } else if (lower === 'resetkeys') {
      this.allKeys = false;
      this.keys = new Map();
    } else if (rule.startsWith('~')) {
      const pattern = rule.slice(1);
      if (hasSpaces(pattern)) throw new AclRuleError('Syntax error');
      this.addKeyPattern(pattern, KEY_READ | KEY_WRITE);
    } else if (rule.startsWith('%')) {
      const tilde = rule.indexOf('~');
      if (tilde < 2) throw new AclRuleError('Syntax error');
      let access = 0;
      for (const c of rule.slice(1, tilde).toUpperCase()) {
        if (c === 'R') access |= KEY_READ;
        else if (c === 'W') access |= KEY_WRITE;
        else throw new AclRuleError('Syntax error');
      }
      const pattern = rule.slice(tilde + 1);
      if (hasSpaces(pattern)) throw new AclRuleError('Syntax error');
      if (pattern === '*' && access === (KEY_READ | KEY_WRITE)) this.apply('~*');
      else this.addKeyPattern(pattern, access);
    } else if (lower === 'allchannels' || rule === '&*') {
      this.allChannels = true;
      this.channels = new Set();
    } else if (lower === 'resetchannels') {
      this.allChannels = false;
      this.channels = new Set();
    } else if (rule.startsWith('&')) {
      if (this.allChannels) throw new AclRuleError("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels");
      const pattern = rule.slice(1);
      if (hasSpaces(pattern)) throw new AclRuleError('Syntax error');
      this.channels.add(pattern);
    } else if (lower === 'allcommands' || lower === '+@all') {
      this.allCommandsBase = true;
      this.rules = [];
    } else if (lower === 'nocommands' || lower === '-@all') {
      this.allCommandsBase = false;
      this.rules = [];
    } else if (rule.startsWith('+') || rule.startsWith('-')) {
      const target = lower.slice(1);
      if (!this.acl.ruleTargetValid(target)) throw new AclRuleError('Unknown command or category name in ACL');
      // A later rule on the same target replaces the earlier one, as Redis keeps them.
      this.rules = this.rules.filter((r) => r.slice(1) !== target);
      this.rules.push(rule[0] + target);
    } else if (lower === 'reset') {
      for (const r of ['resetpass', 'resetkeys', 'resetchannels', 'off', '-@all']) this.apply(r);
    } else if (lower === 'sanitize-payload' || lower === 'skip-sanitize-payload' || lower === 'clearselectors') {
      // No payload sanitizing to skip and no selectors here: accepted, as Redis accepts them.
    } else {
      throw new AclRuleError('Syntax error');
    }
  }

  private changePassword(add: boolean, hash: string): void {
    if (add) {
      this.nopass = false;
      if (!this.passwords.includes(hash)) this.passwords.push(hash);
      return;
    }
    const i = this.passwords.indexOf(hash);
    if (i === -1) throw new AclRuleError('The password you are trying to remove from the user does not exist');
    this.passwords.splice(i, 1);
  }

  private addKeyPattern(pattern: string, access: number): void {
    if (this.allKeys) throw new AclRuleError("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns");
    this.keys.set(pattern, (this.keys.get(pattern) ?? 0) | access);
  }

  /** Rebuilds what execute() reads: the allowed bytes, allKeys, unrestricted. */
  recompute(): void {
    const allowed = this.allowed;
    allowed.fill(this.allCommandsBase ? 1 : 0);
    for (const rule of this.rules) this.acl.applyRuleTo(allowed, rule[0] === '+' ? 1 : 0, rule.slice(1));
    this.acl.allowNoAuth(allowed);
    this.unrestricted = this.allKeys && allowed.every((b) => b === 1);
    this.keyMatchers = [...this.keys].map(([pattern, access]) => keyMatcher(pattern, access));
    this.passwordDigests = this.passwords.map((p) => Buffer.from(p, 'hex'));
  }

  /**
   * Whether the key bytes buf[start, end) may be accessed with `need` (KEY_READ|KEY_WRITE bits): one
   * of the patterns matches with that access. A literal pattern, or a literal prefix and `*` (`app:*`,
   * the usual shape), is compared with the bytes, so no string is made for the key unless a pattern
   * needs the glob matcher (globMatch on the key as latin1, the same answer).
   */
  keyAllowedAt(buf: Buffer, start: number, end: number, need: number): boolean {
    const matchers = this.keyMatchers;
    const len = end - start;
    let text: string | null = null;
    for (let m = 0; m < matchers.length; m++) {
      const k = matchers[m];
      if ((k.access & need) !== need) continue;
      if (k.glob === null) {
        const lit = k.literal;
        const n = lit.length;
        if (k.exact ? len !== n : len < n) continue;
        let i = 0;
        while (i < n && buf[start + i] === lit[i]) i++;
        if (i === n) return true;
      } else {
        if (text === null) text = buf.toString('latin1', start, end);
        if (globMatch(k.glob, text)) return true;
      }
    }
    return false;
  }

  /** Redis's rule string for ACL LIST and the ACL file (without the `user <name> ` prefix). */
  describe(): string {
    const parts: string[] = [this.enabled ? 'on' : 'off'];
    if (this.nopass) parts.push('nopass');
    for (const p of this.passwords) parts.push('#' + p);
    parts.push(...this.keyRules());
    if (this.allChannels) parts.push('&*');
    else parts.push('resetchannels', ...[...this.channels].map((c) => '&' + c));
    parts.push(this.commandRules());
    return parts.join(' ');
  }

  keyRules(): string[] {
    return [...this.keys].map(([pattern, access]) => (access === (KEY_READ | KEY_WRITE) ? '~' : access === KEY_READ ? '%R~' : '%W~') + pattern);
  }

  commandRules(): string {
    return [this.allCommandsBase ? '+@all' : '-@all', ...this.rules].join(' ');
  }

  /**
   * Whether `given` (the SHA-256 digest of a password sent) is one of the user's: each stored digest
   * is compared in constant time, never the passwords. A user with no password is compared with a
   * dummy digest, so it costs what a user with one does (see Acl.authenticate).
   */
  digestMatches(given: Buffer): boolean {
    if (this.nopass) return true;
    const digests = this.passwordDigests;
    if (digests.length === 0) {
      compareDigests(given, UNKNOWN_USER_DIGEST);
      return false;
    }
    let ok = false;
    for (let i = 0; i < digests.length; i++) if (compareDigests(given, digests[i])) ok = true;
    return ok;
  }
}

/** Compares two SHA-256 digests in constant time; every AUTH compares at least one pair. */
function compareDigests(given: Buffer, stored: Buffer): boolean {
  authDigestComparisons++;
  return timingSafeEqual(given, stored);
}

/**
 * How many digest comparisons AUTH made since start: the same for a name that exists and one that
 * does not (test/acl/acl-rules.test.ts reads it).
 */
export let authDigestComparisons = 0;

/** What an unknown user's password is compared with: random, so no password matches it. */
const UNKNOWN_USER_DIGEST = randomBytes(32);

function sha256Hex(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export interface AclLogEntry {
  count: number;
  reason: 'command' | 'key' | 'auth' | 'channel';
  context: string;
  object: string;
  username: string;
  clientInfo: string;
  entryId: number;
  createdMs: number;
  updatedMs: number;
}

/** Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA: a repeat of an entry within this is counted in it. */
const LOG_GROUPING_MS = 60_000;
/** Redis looks for a repeat among this many newest entries only (bounded work per denial). */
const LOG_GROUPING_SCAN = 10;
/**
 * How much of a refused key or a user name an ACL LOG entry keeps (src/log-text.ts). Redis keeps
 * them whole; 128 entries of a 512 MiB key each would be 64 GiB.
 */
export const ACL_LOG_TEXT_BYTES = 1024;
/** Redis's acllog-max-len default. */
const LOG_MAX_LEN = 128;

export class Acl {
  readonly users = new Map<string, User>();
  readonly defaultUser: User;
  /** Newest first. */
  log: AclLogEntry[] = [];
  private nextEntryId = 0;
  readonly commandCount: number;
  private readonly byName = new Map<string, CommandSpec>();
  private readonly byCategory = new Map<string, CommandSpec[]>();
  private readonly noAuth: CommandSpec[] = [];
  /**
   * What AUTH compares a password with for a user name that does not exist: a user (in no map) with
   * one random password digest, so that path runs the very code a known user's does.
   */
  private readonly unknownUser: User;
  /** The requirepass last given to the default user (see syncRequirepass). */
  private requirepass: string | null = null;

  constructor(commands: CommandSpec[]) {
    let count = 0;
    for (const spec of commands) {
      for (const s of [spec, ...(spec.subcommands ?? [])]) {
        count = Math.max(count, s.id! + 1);
        this.byName.set(s.fullName ?? s.name, s);
        if (s.flags.includes('no-auth')) this.noAuth.push(s);
        for (const c of s.aclCategories!) {
          let list = this.byCategory.get(c);
          if (list === undefined) this.byCategory.set(c, (list = []));
          list.push(s);
        }
      }
    }
    this.commandCount = count;
    this.defaultUser = this.newDefaultUser();
    this.unknownUser = new User('', this);
    this.unknownUser.apply('#' + UNKNOWN_USER_DIGEST.toString('hex'));
    this.unknownUser.recompute();
    this.users.set('default', this.defaultUser);
  }

  private newDefaultUser(): User {
    const u = new User('default', this);
    for (const r of ['on', 'nopass', '~*', '&*', '+@all']) u.apply(r);
    u.recompute();
    return u;
  }

  /** Commands in a category (`limiter`), for ACL CAT; undefined for an unknown one. */
  categoryCommands(category: string): CommandSpec[] | undefined {
    if (!isCategory(category)) return undefined;
    return this.byCategory.get(category) ?? [];
  }

  command(fullName: string): CommandSpec | undefined {
    return this.byName.get(fullName);
  }

  ruleTargetValid(target: string): boolean {
    if (target.startsWith('@')) return isCategory(target.slice(1));
    return this.byName.has(target);
  }

  applyRuleTo(allowed: Uint8Array, value: number, target: string): void {
    if (target.startsWith('@')) {
      for (const s of this.byCategory.get(target.slice(1)) ?? []) allowed[s.id!] = value;
      return;
    }
    const spec = this.byName.get(target);
    if (spec === undefined) return;
    allowed[spec.id!] = value;
    for (const s of spec.subcommands ?? []) allowed[s.id!] = value;
  }

  /** AUTH, HELLO, QUIT, RESET run for every user (Redis skips the ACL check for no-auth commands). */
  allowNoAuth(allowed: Uint8Array): void {
    for (const s of this.noAuth) allowed[s.id!] = 1;
  }

  /** Applies `rules` to a copy of `name` (created if absent), then takes it: all or nothing. */
  setUser(name: string, rules: string[]): { user: User; created: boolean } {
    const existing = this.users.get(name);
    const draft = existing?.copy() ?? new User(name, this);
    for (const r of rules) {
      try {
        draft.apply(r);
      } catch (e) {
        if (e instanceof AclRuleError) throw new AclRuleError(`Error in ACL SETUSER modifier '${r}': ${e.message}`);
        throw e;
      }
    }
    draft.recompute();
    if (existing !== undefined) {
      existing.assign(draft);
      return { user: existing, created: false };
    }
    this.users.set(name, draft);
    return { user: draft, created: true };
  }

  /**
   * `user` if it exists, is on and `pass` is one of its passwords (or it is nopass). A name that
   * does not exist costs the same hash and digest comparison as one that does (a dummy digest), so
   * the reply time does not tell which user names exist.
   */
  authenticate(name: string, pass: Buffer): User | null {
    const u = this.users.get(name);
    const given = createHash('sha256').update(pass).digest();
    if (u === undefined) {
      this.unknownUser.digestMatches(given);
      return null;
    }
    return u.digestMatches(given) && u.enabled ? u : null;
  }

  /**
   * Gives the default user `requirepass` as its one password (nopass when empty), as Redis does
   * when requirepass is set in the config or by CONFIG SET; only when it changed since last time.
   */
  syncRequirepass(value: string): void {
    if (value === this.requirepass) return;
    this.requirepass = value;
    const bytes = Buffer.from(value, 'latin1');
    this.defaultUser.apply('resetpass');
    if (value === '') this.defaultUser.apply('nopass');
    else this.defaultUser.apply('>' + bytes.toString('latin1'));
    this.defaultUser.recompute();
  }

  /**
   * Adds an ACL LOG entry, or counts a repeat in one of the 10 newest (Redis's addACLLogEntry).
   * `username` is kept cut to ACL_LOG_TEXT_BYTES (AUTH logs the unknown name a client sent);
   * `object` (a refused key: loggedArg) and `clientInfo` (aclClientInfo) come already cut.
   */
  addLog(reason: AclLogEntry['reason'], context: string, object: string, username: string, clientInfo: string, nowMs: number): void {
    username = loggedText(username, ACL_LOG_TEXT_BYTES);
    const scan = Math.min(this.log.length, LOG_GROUPING_SCAN);
    for (let i = 0; i < scan; i++) {
      const e = this.log[i];
      if (e.reason === reason && e.context === context && e.object === object && e.username === username && nowMs - e.updatedMs < LOG_GROUPING_MS) {
        e.count++;
        e.updatedMs = nowMs;
        e.clientInfo = clientInfo;
        // The most recently updated entry comes first, as Redis moves it to the head.
        this.log.splice(i, 1);
        this.log.unshift(e);
        return;
      }
    }
    this.log.unshift({ count: 1, reason, context, object, username, clientInfo, entryId: this.nextEntryId++, createdMs: nowMs, updatedMs: nowMs });
    if (this.log.length > LOG_MAX_LEN) this.log.length = LOG_MAX_LEN;
  }

  /** The users sorted by name, as Redis keeps them (ACL LIST, ACL USERS, the ACL file). */
  sortedUsers(): User[] {
    return [...this.users.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The ACL file's text: one `user <name> <rules>` line per user, as Redis writes it. */
  fileText(): string {
    let out = '';
    for (const u of this.sortedUsers()) out += `user ${u.name} ${u.describe()}\n`;
    return out;
  }

  save(path: string): void {
    // A new temp file under a random name, renamed over the file: never written through a symlink.
    replaceFileSync(path, Buffer.from(this.fileText(), 'latin1'), 0o644, 'tmp');
  }

  /**
   * Parses an ACL file into new users (Redis's ACLLoadFromFile): every line must be valid or nothing
   * changes. A default user missing from the file is the built-in one. Throws AclRuleError naming
   * the file and line.
   */
  parseFile(path: string): Map<string, User> {
    let text: string;
    try {
      text = readFileSync(path).toString('latin1');
    } catch (e) {
      throw new AclRuleError(`Error loading ACLs, opening file '${path}': ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'No such file or directory' : (e as Error).message}`);
    }
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
      const u = name === 'default' ? new User('default', this) : new User(name, this);
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

  /**
   * Replaces every user with the file's (the default user object stays, with the file's rules).
   * Returns the names of users that no longer exist or changed, whose clients are disconnected.
   */
  replaceUsers(loaded: Map<string, User>): Set<User> {
    const gone = new Set<User>();
    const newDefault = loaded.get('default') ?? this.newDefaultUser();
    for (const u of this.users.values()) {
      if (u !== this.defaultUser) gone.add(u);
    }
    this.users.clear();
    this.defaultUser.assign(newDefault);
    this.users.set('default', this.defaultUser);
    for (const [name, u] of loaded) if (name !== 'default') this.users.set(name, u);
    return gone;
  }
}

/** Redis refuses usernames with spaces or NUL bytes. */
export function validUserName(name: string): boolean {
  return !hasSpaces(name) && name.length > 0;
}

/**
 * Redis's ACLStringHasSpaces: a C isspace() byte (space, \t, \n, \v, \f, \r) or NUL. User names and
 * key and channel patterns holding one are refused, so every rule is one word of the ACL file. Not
 * JS's \s, which also takes the byte 0xA0 (NBSP in latin1): a binary-safe name may hold that.
 */
export function hasSpaces(text: string): boolean {
  return /[ \t\n\v\f\r\0]/.test(text);
}

/** A line of the ACL file without the spaces, tabs and CR/LF around it (Redis's sdstrim " \t\r\n"). */
function trimFileLine(line: string): string {
  return line.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, '');
}

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
  return user.keyAllowedAt(argv.source(i), argv.start(i), argv.end(i), need);
}

/**
 * A key pattern prepared for keyAllowedAt: `literal` alone (exact) or followed by `*`s (prefix) when
 * the rest has no glob character, else `glob` (the pattern, for globMatch).
 */
interface KeyMatcher {
  readonly access: number;
  readonly literal: Buffer;
  readonly exact: boolean;
  readonly glob: string | null;
}

function keyMatcher(pattern: string, access: number): KeyMatcher {
  let end = pattern.length;
  while (end > 0 && pattern[end - 1] === '*') end--;
  const head = pattern.slice(0, end);
  if (/[*?[\\]/.test(head)) return { access, literal: Buffer.alloc(0), exact: false, glob: pattern };
  return { access, literal: Buffer.from(head, 'latin1'), exact: end === pattern.length, glob: null };
}

/** Redis 7.2's NOPERM texts (getAclErrorMessage, not verbose). */
export function noPermMessage(result: number, user: User, fullName: string): string {
  return result === ACL_DENIED_CMD
    ? `NOPERM User ${user.name} has no permissions to run the '${fullName}' command`
    : 'NOPERM No permissions to access a key';
}
