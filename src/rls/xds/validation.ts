/**
 * Validating a response's resources without holding the event loop: the file loader's checks build
 * a YAML document per resource, which costs far more than decoding it (some 2 ms per 1,000 bytes of
 * resources on an idle core), so a large push would hold decisions, RESP and the metrics port still.
 * Up to INLINE_MAX_BYTES of resources (a few hundred descriptors: what gateways push) are validated
 * at once, cheaper than starting a thread; more go to a worker thread, one response at a time
 * (client.ts), with a deadline and a heap of its own: a response that takes longer or needs more is
 * refused.
 */
import { Worker } from 'node:worker_threads';
import { rlsConfigOf, type RlsConfig, type RlsDomain } from '../config.js';
import type { AnyMessage } from './protos.js';
import { checkResourceCount, domainsFromResources, XdsResourceError } from './resources.js';

/** Resources of at most this many bytes in all are validated on the event loop. */
export const INLINE_MAX_BYTES = 16 * 1024;
/** A validation that has not finished in this time is given up (and the response NACKed). */
export const VALIDATION_TIMEOUT_MS = 60_000;
/** The worker's heap: the largest response allowed needs far less. */
const VALIDATION_HEAP_MB = 512;

/** What the worker posts back. */
export type ValidationResult = { ok: true; domains: RlsDomain[] } | { ok: false; message: string };

/**
 * The configuration the resources make, every resource one domain (a domain given twice is
 * refused, as envoyproxy/ratelimit's loader refuses it). Rejects with XdsResourceError or
 * RlsConfigError, the NACK's reason.
 */
export async function validateResources(resources: AnyMessage[]): Promise<RlsConfig> {
  checkResourceCount(resources);
  let bytes = 0;
  for (const r of resources) bytes += r.value.length;
  const domains = bytes <= INLINE_MAX_BYTES ? domainsFromResources(resources) : await inWorker(resources);
  return rlsConfigOf(domains);
}

function inWorker(resources: AnyMessage[]): Promise<RlsDomain[]> {
  return new Promise<RlsDomain[]>((resolve, reject) => {
    const worker = new Worker(new URL('./validate-worker.js', import.meta.url), {
      workerData: { resources },
      resourceLimits: { maxOldGenerationSizeMb: VALIDATION_HEAP_MB },
    });
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
      void worker.terminate();
    };
    const timer = setTimeout(() => settle(() => reject(new XdsResourceError(`validation took longer than ${VALIDATION_TIMEOUT_MS} ms`))), VALIDATION_TIMEOUT_MS);
    worker.on('message', (result: ValidationResult) => settle(() => (result.ok ? resolve(result.domains) : reject(new XdsResourceError(result.message)))));
    worker.on('error', (e) => settle(() => reject(new XdsResourceError(`validation failed: ${e.message}`))));
    worker.on('exit', (code) => settle(() => reject(new XdsResourceError(`validation ended without an answer (exit code ${code})`))));
  });
}
