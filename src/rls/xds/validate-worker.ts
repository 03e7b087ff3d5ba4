/**
 * The worker thread that validates one xDS response's resources (validation.ts): decodes each
 * RateLimitConfig and runs the file loader's checks on it, away from the event loop, and posts back
 * the validated domains (structured clone) or the reason they were refused.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { domainsFromResources } from './resources.js';
import type { ValidationResult } from './validation.js';

const { resources } = workerData as { resources: { type_url: string; value: Uint8Array }[] };

let result: ValidationResult;
try {
  result = { ok: true, domains: domainsFromResources(resources.map((r) => ({ type_url: r.type_url, value: Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength) }))) };
} catch (e) {
  result = { ok: false, message: (e as Error).message };
}
parentPort!.postMessage(result);
