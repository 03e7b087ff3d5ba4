/**
 * Waiting for something a server does in its own time (a periodic task, a log line, a process
 * exit). The bound is generous on purpose: a busy machine (CI sharing its cores) may take seconds
 * for what takes milliseconds when idle, and the test asserts that it happens, not how fast.
 */
export const WAIT_LIMIT_MS = 30_000;

/** Resolves once `check` is true; throws after `limitMs` naming `what`. Polls every `stepMs`. */
export async function waitFor(check: () => boolean | Promise<boolean>, what: string, limitMs = WAIT_LIMIT_MS, stepMs = 20): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${limitMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
