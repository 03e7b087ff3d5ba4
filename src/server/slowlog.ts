/**
 * The slow log, as Redis's (src/slowlog.c): commands that ran at least `slowlog-log-slower-than`
 * microseconds (negative: never; 0: every command), newest first, at most `slowlog-max-len`
 * entries. An entry keeps at most 32 arguments of at most 128 bytes each, marked as Redis marks
 * what it cut, so a huge command cannot make the log huge; the client name is cut likewise.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { CommandSpec } from '../commands/types.js';
import { loggedArg, loggedField } from '../log-text.js';

const MAX_ARGC = 32;

export interface SlowlogEntry {
  id: number;
  /** Unix seconds (server clock). */
  timestamp: number;
  durationUs: number;
  /** Binary strings (one char per byte). */
  args: string[];
  clientAddr: string;
  clientName: string;
}

export class SlowLog {
  private entries: SlowlogEntry[] = [];
  private nextId = 0;

  get length(): number {
    return this.entries.length;
  }

  /**
   * Records a command if it was slow enough; cheap when it was not (one comparison). The arguments
   * `secretArg` names (passwords, user names, sensitive config values: compiled by the command
   * table from each command's `redacts` rule) show as `(redacted)`, as Redis 7. The client name is kept cut
   * (src/log-text.ts).
   */
  consider(thresholdUs: number, maxLen: number, durationUs: number, argv: CommandArgs, secretArg: CommandSpec['secretArg'], nowUs: number, clientAddr: string, clientName: string): void {
    if (thresholdUs < 0 || durationUs < thresholdUs) return;
    const argc = Math.min(argv.length, MAX_ARGC);
    const args: string[] = [];
    for (let i = 0; i < argc; i++) {
      if (argc !== argv.length && i === argc - 1) {
        args.push(`... (${argv.length - argc + 1} more arguments)`);
        break;
      }
      if (secretArg !== undefined && i > 0 && secretArg(argv, i)) {
        args.push('(redacted)');
        continue;
      }
      args.push(loggedArg(argv, i)); // cut before converting: the argument may be 512 MiB
    }
    this.entries.unshift({ id: this.nextId++, timestamp: Math.floor(nowUs / 1e6), durationUs: Math.round(durationUs), args, clientAddr, clientName: loggedField(clientName) });
    if (this.entries.length > maxLen) this.entries.length = Math.max(0, maxLen);
  }

  /** The newest `count` entries (all of them for a negative count). */
  newest(count: number): SlowlogEntry[] {
    return count < 0 ? this.entries.slice() : this.entries.slice(0, count);
  }

  reset(): void {
    this.entries = [];
  }
}
