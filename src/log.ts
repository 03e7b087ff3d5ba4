/**
 * Logging: one line per event, either human (Redis-like) or one JSON object per line, filtered by
 * level. Everything goes to stdout (or `logfile`), where container runtimes collect it.
 */
import { appendFileSync } from 'node:fs';

export type LogLevel = 'debug' | 'verbose' | 'notice' | 'warning';
const RANK: Record<string, number> = { debug: 0, verbose: 1, notice: 2, warning: 3, nothing: 4 };
const MARK: Record<LogLevel, string> = { debug: '.', verbose: '-', notice: '*', warning: '#' };

export class Logger {
  level = 'notice';
  format: 'human' | 'json' = 'human';
  file = '';

  log(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
    if (RANK[level] < RANK[this.level]) return;
    let line: string;
    if (this.format === 'json') {
      line = JSON.stringify({ ts: new Date().toISOString(), level, pid: process.pid, msg, ...fields });
    } else {
      const extra = Object.entries(fields).map(([k, v]) => ` ${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join('');
      line = `${process.pid}:M ${new Date().toISOString()} ${MARK[level]} ${msg}${extra}`;
    }
    if (this.file) appendFileSync(this.file, line + '\n');
    else process.stdout.write(line + '\n');
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
