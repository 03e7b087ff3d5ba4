/**
 * The guarded scheduler (src/server/tasks.ts), in process: a timer callback that throws is logged
 * (at most once per second per task), counted, and the timer goes on; nothing reaches the process's
 * uncaught-exception path.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Logger } from '../../src/log.ts';
import { Tasks } from '../../src/server/tasks.ts';

function recordingLogger(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const log = { warning: (message: string) => lines.push(message) } as unknown as Logger;
  return { log, lines };
}

// The timers and Date.now() are vitest's fake ones: "ten failures within a second" is ten ticks of
// the fake clock, not a hope that a loaded machine runs ten 1 ms timers within a real second.
beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'setImmediate', 'clearImmediate', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Tasks', () => {
  it('a periodic task that throws every time is counted, logged once a second, and keeps running', () => {
    const { log, lines } = recordingLogger();
    const tasks = new Tasks(log);
    let runs = 0;
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown) => uncaught.push(e);
    process.on('uncaughtException', onUncaught);
    const timer = tasks.every('flaky task', 1, () => {
      runs++;
      throw Object.assign(new Error('too many open files'), { code: 'EMFILE' });
    });
    try {
      vi.advanceTimersByTime(10);
      expect(runs).toBe(10);
      expect(tasks.errors).toBe(10);
      // Ten failures within a second: one line, naming the task and the cause.
      expect(lines).toEqual(['flaky task failed (the server goes on): EMFILE: too many open files']);
      // A second later: the next line, telling how many were not logged.
      vi.advanceTimersByTime(1000);
      expect(runs).toBe(1010);
      expect(tasks.errors).toBe(1010);
      expect(lines).toHaveLength(2);
      expect(lines[1]).toBe('flaky task failed (the server goes on): EMFILE: too many open files (and 999 more not logged)');
    } finally {
      clearInterval(timer);
      process.off('uncaughtException', onUncaught);
    }
    expect(uncaught).toEqual([]);
  });

  it('soon() and after() are guarded too', () => {
    const { log, lines } = recordingLogger();
    const tasks = new Tasks(log);
    tasks.soon('deferred', () => {
      throw new Error('boom');
    });
    tasks.after('later', 1, () => {
      throw new Error('bang');
    });
    vi.runAllTimers();
    expect(tasks.errors).toBe(2);
    expect([...lines].sort()).toEqual(['deferred failed (the server goes on): boom', 'later failed (the server goes on): bang']);
  });
});
