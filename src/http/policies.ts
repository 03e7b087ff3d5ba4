/**
 * The `policy` option: one policy or several, checked and formatted once per list (a plan function
 * returns the same objects for the same plan), with the words a refusal's detail uses.
 */
import { ALGORITHMS, BURST_ALGORITHMS, CellgateArgumentError, type Algorithm } from '../client/index.js';
import { policyFields, type PolicyFields } from './headers.js';

/** BURST_ALGORITHMS as the error lists them: `a, b and c`. */
const BURST_LIST = `${BURST_ALGORITHMS.slice(0, -1).join(', ')} and ${BURST_ALGORITHMS[BURST_ALGORITHMS.length - 1]}`;

export interface Policy {
  /** The name in the RateLimit fields (default "default", or "p1", "p2"... when there are several). */
  name?: string;
  /** Default "gcra" (RL.GCRA: smooth, one small state per key). */
  algorithm?: Algorithm;
  /** Requests (cost units) per period. */
  limit: number;
  periodMs: number;
  /** Capacity, for the algorithms that take a BURST (`BURST_ALGORITHMS`; default `limit`). */
  burst?: number;
}

export interface ResolvedPolicy {
  name: string;
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst: number | undefined;
  /** The most one request can ever spend. */
  capacity: number;
  /** `10 requests per 10 seconds`. */
  quota: string;
}

/** A policy list checked and formatted once. */
export interface PolicySet extends PolicyFields {
  list: ResolvedPolicy[];
}

export function resolvePolicies(input: Policy | Policy[]): PolicySet {
  const list = Array.isArray(input) ? input : [input];
  if (list.length === 0 || list[0] === undefined) throw new CellgateArgumentError('policy', 'policy: at least one policy is needed');
  const names = new Set<string>();
  const resolved = list.map((p, i): ResolvedPolicy => {
    if (p === null || typeof p !== 'object') throw new CellgateArgumentError('policy', `policy ${i + 1} must be an object, not ${describe(p)}`);
    const name = p.name ?? (list.length === 1 ? 'default' : `p${i + 1}`);
    // Structured-field strings are printable ASCII; a name outside that could not be sent.
    if (typeof name !== 'string' || !/^[\x20-\x7e]+$/.test(name)) throw new CellgateArgumentError('policy', `policy name '${String(name)}' must be printable ASCII`);
    if (names.has(name)) throw new CellgateArgumentError('policy', `policy name '${name}' is used twice`);
    names.add(name);
    const algorithm = p.algorithm ?? 'gcra';
    if (!ALGORITHMS.includes(algorithm)) throw new CellgateArgumentError('policy', `policy '${name}': algorithm must be one of ${ALGORITHMS.join(', ')}`);
    for (const [field, v] of [['limit', p.limit], ['periodMs', p.periodMs], ['burst', p.burst ?? 1]] as const) {
      if (!Number.isSafeInteger(v) || v < 1) throw new CellgateArgumentError('policy', `policy '${name}': ${field} must be an integer >= 1, not ${describe(v)}`);
    }
    if (p.burst !== undefined && !BURST_ALGORITHMS.includes(algorithm)) {
      throw new CellgateArgumentError('policy', `policy '${name}': burst applies to ${BURST_LIST} only`);
    }
    return {
      name,
      algorithm,
      limit: p.limit,
      periodMs: p.periodMs,
      burst: p.burst,
      capacity: p.burst ?? p.limit,
      quota: `${p.limit} ${p.limit === 1 ? 'request' : 'requests'} per ${describePeriod(p.periodMs)}`,
    };
  });
  return { list: resolved, ...policyFields(resolved) };
}

function describePeriod(ms: number): string {
  const units: [number, string][] = [[86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1000, 'second'], [1, 'millisecond']];
  for (const [size, word] of units) {
    if (ms % size === 0) {
      const n = ms / size;
      return n === 1 ? word : `${n} ${word}s`;
    }
  }
  return `${ms} milliseconds`;
}

/** A value as an error message names it. */
export function describe(v: unknown): string {
  return typeof v === 'string' ? `'${v}'` : typeof v === 'function' ? 'a function' : v !== null && typeof v === 'object' ? 'an object' : String(v);
}
