/**
 * The guarded scheduler (src/server/tasks.ts), in process: a timer callback that throws is logged
 * (at most once per second per task), counted, and the timer goes on; nothing reaches the process's
 * uncaught-exception path.
 */
import { describe, expect, it } from 'vitest';
import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from '../../src/log.ts';
import { Tasks } from '../../src/server/tasks.ts';

function recordingLogger(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const log = { warning: (message: string) => lines.push(message) } as unknown as Logger;
  return { log, lines };
}

describe('Tasks', () => {
  it('a periodic task that throws every time is counted, logged once, and keeps running', async () => {
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
      while (runs < 10) await delay(2);
    } finally {
      clearInterval(timer);
      process.off('uncaughtException', onUncaught);
    }
    expect(uncaught).toEqual([]);
    expect(tasks.errors).toBe(runs);
    // Ten failures within a second: one line, naming the task and the cause.
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe('flaky task failed (the server goes on): EMFILE: too many open files');
  });

  it('soon() and after() are guarded too', async () => {
    const { log, lines } = recordingLogger();
    const tasks = new Tasks(log);
    tasks.soon('deferred', () => {
      throw new Error('boom');
    });
    tasks.after('later', 1, () => {
      throw new Error('bang');
    });
    await delay(20);
    expect(tasks.errors).toBe(2);
    // Which runs first, a setImmediate or a 1 ms timer, depends on the event loop's timing: either order.
    expect([...lines].sort()).toEqual(['deferred failed (the server goes on): boom', 'later failed (the server goes on): bang']);
  });
});
