/**
 * Logging: one line per event, either human (Redis-like) or one JSON object per line, filtered by
 * level. Everything goes to stdout (or `logfile`), where container runtimes collect it; start-up
 * failures go to stderr (fatal()), in the same format.
 */
import { appendFileSync } from 'node:fs';

export type LogLevel = 'debug' | 'verbose' | 'notice' | 'warning';
const RANK: Record<string, number> = { debug: 0, verbose: 1, notice: 2, warning: 3, nothing: 4 };
const MARK: Record<LogLevel, string> = { debug: '.', verbose: '-', notice: '*', warning: '#' };

/**
 * The ` key=value` tail of a human line: only the fields whose value the message does not already
 * show ("ready on port 7100" needs no " port=7100"); JSON lines keep every field.
 */
function humanFields(msg: string, fields: Record<string, unknown>): string {
  let extra = '';
  for (const k in fields) {
    const v = fields[k];
    const text = typeof v === 'string' ? v : JSON.stringify(v);
    if (text === undefined || msg.includes(text)) continue;
    extra += ` ${k}=${text}`;
  }
  return extra;
}

export class Logger {
  level = 'notice';
  format: 'human' | 'json' = 'human';
  file = '';

  /** Whether a line at `level` would be written (to skip building its text when not). */
  enabled(level: LogLevel): boolean {
    return RANK[level] >= RANK[this.level];
  }

  log(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
    if (RANK[level] < RANK[this.level]) return;
    const line = this.format === 'json'
      ? JSON.stringify({ ts: new Date().toISOString(), level, pid: process.pid, msg, ...fields })
      : `${process.pid}:M ${new Date().toISOString()} ${MARK[level]} ${msg}${humanFields(msg, fields)}`;
    if (this.file) this.append(line);
    else process.stdout.write(line + '\n');
  }

  /** The error code of the last failed write to `logfile`, '' while writes succeed. */
  private fileError = '';

  /**
   * A line to `logfile`. A write that fails (the disk is full, the file was made unwritable) must
   * not end the process, which on a full disk goes on serving (docs/persistence.md): the line goes
   * to stderr instead, after a note saying why when the failure begins.
   */
  private append(line: string): void {
    try {
      appendFileSync(this.file, line + '\n');
      this.fileError = '';
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
      if (code !== this.fileError) process.stderr.write(`cellgate: cannot write the log file ${this.file} (${code}): logging to stderr until it can\n`);
      this.fileError = code;
      process.stderr.write(line + '\n');
    }
  }

  /**
   * A start-up failure: one line on stderr (where a supervisor shows why the process exited), in the
   * chosen format, so a log pipeline that parses JSON gets a JSON object for it too; also appended
   * to `logfile` when one is set.
   */
  fatal(msg: string, fields: Record<string, unknown> = {}): void {
    const line = this.format === 'json'
      ? JSON.stringify({ ts: new Date().toISOString(), level: 'fatal', pid: process.pid, msg, ...fields })
      : `cellgate: ${msg}`;
    process.stderr.write(line + '\n');
    if (this.file) {
      try {
        appendFileSync(this.file, line + '\n');
      } catch {
        /* stderr has it */
      }
    }
  }

  debug(msg: string, fields?: Record<string, unknown>): void {
    this.log('debug', msg, fields);
  }
  verbose(msg: string, fields?: Record<string, unknown>): void {
    this.log('verbose', msg, fields);
  }
  notice(msg: string, fields?: Record<string, unknown>): void {
    this.log('notice', msg, fields);
  }
  warning(msg: string, fields?: Record<string, unknown>): void {
    this.log('warning', msg, fields);
  }
}
