/**
 * ACL users, as Redis 7: the users and their rules (`on`, `>pass`, `+@limiter`, `~key*`, ...), the
 * rule strings ACL LIST prints, AUTH. Every rule string is handled as bytes (latin1, one char per
 * byte), like Redis's sds strings.
 *
 * What execute() reads per command is precomputed here: `unrestricted` (every command, every key:
 * the default user costs that one test), `allowed` (one byte per command id) and `allKeys`. Beside
 * this file: the per-command check (check.ts), key patterns (key-patterns.ts), passwords
 * (passwords.ts), the ACL file (file.ts), the ACL log (log.ts), rule syntax (rule-syntax.ts).
 */
import { createHash } from 'node:crypto';
import type { CommandSpec } from '../commands/types.js';
import { isCategory } from './categories.js';
import { aclFileText, parseAclFile, parseAclText, saveAclFile } from './file.js';
import { KEY_READ, KEY_WRITE, keyMatcher, keyRule, type KeyMatcher } from './key-patterns.js';
import { addLogEntry, type AclLogEntry } from './log.js';
import { compareDigests, sha256Hex, UNKNOWN_USER_DIGEST } from './passwords.js';
import { AclRuleError, hasSpaces } from './rule-syntax.js';

export { ACL_DENIED_CMD, ACL_DENIED_KEY, ACL_OK, aclCheck, deniedKeyIndex, noPermMessage } from './check.js';
export { KEY_READ, KEY_WRITE } from './key-patterns.js';
export { ACL_LOG_TEXT_BYTES, type AclLogEntry } from './log.js';
export { authDigestComparisons } from './passwords.js';
export { AclRuleError, hasSpaces, validUserName } from './rule-syntax.js';

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
  keyMatchers: readonly KeyMatcher[] = [];
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
    return [...this.keys].map(([pattern, access]) => keyRule(pattern, access));
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
    if (addLogEntry(this.log, this.nextEntryId, reason, context, object, username, clientInfo, nowMs)) this.nextEntryId++;
  }

  /** The users sorted by name, as Redis keeps them (ACL LIST, ACL USERS, the ACL file). */
  sortedUsers(): User[] {
    return [...this.users.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The ACL file's text: one `user <name> <rules>` line per user, as Redis writes it. */
  fileText(): string {
    return aclFileText(this.sortedUsers());
  }

  save(path: string): void {
    saveAclFile(path, this.sortedUsers());
  }

  /**
   * Parses an ACL file into new users (Redis's ACLLoadFromFile, file.ts): every line must be valid or
   * nothing changes. A default user missing from the file is the built-in one. Throws AclRuleError
   * naming the file and line.
   */
  parseFile(path: string): Map<string, User> {
    return parseAclFile(path, (name) => new User(name, this));
  }

  /** The same, for the file's text read already (ACL LOAD reads it off the event loop). */
  parseText(path: string, text: string): Map<string, User> {
    return parseAclText(path, text, (name) => new User(name, this));
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
