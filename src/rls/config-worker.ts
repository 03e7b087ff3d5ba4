/**
 * The worker thread that parses a large `rls-config` set (config-dir.ts): validates the files' texts
 * away from the event loop and posts back the validated domains (structured clone) or the reason the
 * set was refused.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { parseConfigFiles, RlsConfigLoadError, type ConfigFile, type ParseResult } from './config-dir.js';

let result: ParseResult;
try {
  result = { ok: true, domains: parseConfigFiles(workerData as ConfigFile[]) };
} catch (e) {
  result = e instanceof RlsConfigLoadError
    ? { ok: false, reason: e.reason, message: e.message }
    : { ok: false, reason: 'invalid', message: (e as Error).message };
}
parentPort!.postMessage(result);
