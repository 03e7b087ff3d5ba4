/**
 * The response's rate-limit header fields. By default the IETF RateLimit header fields draft
 * (draft-ietf-httpapi-ratelimit-headers-11, whose syntax is that of drafts 08 to 11):
 * `RateLimit-Policy: "default";q=10;w=10` and `RateLimit: "default";r=4;t=6`, one list member per
 * policy; `standardHeaders` picks the syntax of draft 07 or 06 instead for clients that parse those,
 * and `legacyHeaders` adds express-rate-limit's `X-RateLimit-*`.
 */
import type { Decision } from '../client/index.js';
import type { ResolvedPolicy } from './policies.js';

/** Which RateLimit header fields are sent. */
export type HeaderDraft = 'draft-11' | 'draft-8' | 'draft-7' | 'draft-6';

/** The values `standardHeaders` takes. */
export const DRAFTS: readonly (HeaderDraft | false)[] = ['draft-11', 'draft-8', 'draft-7', 'draft-6', false];

/** RateLimit-Policy's value in each syntax, for a policy list (made once per list). */
export interface PolicyFields {
  policyField: string;
  policyFieldDraft7: string;
}

export function policyFields(policies: readonly ResolvedPolicy[]): PolicyFields {
  return {
    policyField: policies.map((p) => `${sfString(p.name)};q=${p.capacity};w=${ceilSeconds(p.periodMs)}`).join(', '),
    policyFieldDraft7: policies.map((p) => `${p.capacity};w=${ceilSeconds(p.periodMs)}`).join(', '),
  };
}

/**
 * Appends to `headers` the fields of `draft` (none for false) and, with `legacy`, the X-RateLimit-*
 * fields, for the decisions `results` of `policies` (one each, in order); `tight` is the index of the
 * one with the fewest remaining, which the syntaxes with room for one limit show.
 */
export function pushRateLimitHeaders(headers: [string, string][], draft: HeaderDraft | false, legacy: boolean, policies: readonly ResolvedPolicy[], fields: PolicyFields, results: readonly Decision[], tight: number): void {
  if (draft === 'draft-11' || draft === 'draft-8') {
    headers.push(['RateLimit-Policy', fields.policyField], ['RateLimit', results.map((d, i) => `${sfString(policies[i].name)};r=${d.remaining};t=${ceilSeconds(d.resetAfterMs)}`).join(', ')]);
  } else if (draft === 'draft-7') {
    headers.push(['RateLimit-Policy', fields.policyFieldDraft7], ['RateLimit', `limit=${results[tight].limit}, remaining=${results[tight].remaining}, reset=${ceilSeconds(results[tight].resetAfterMs)}`]);
  } else if (draft === 'draft-6') {
    headers.push(
      ['RateLimit-Policy', fields.policyFieldDraft7],
      ['RateLimit-Limit', String(results[tight].limit)],
      ['RateLimit-Remaining', String(results[tight].remaining)],
      ['RateLimit-Reset', String(ceilSeconds(results[tight].resetAfterMs))],
    );
  }
  if (legacy) {
    // The legacy set has room for one limit (the tightest); Reset is a time, in epoch seconds, as
    // express-rate-limit sends it.
    headers.push(
      ['X-RateLimit-Limit', String(results[tight].limit)],
      ['X-RateLimit-Remaining', String(results[tight].remaining)],
      ['X-RateLimit-Reset', String(Math.ceil((Date.now() + results[tight].resetAfterMs) / 1000))],
    );
  }
}

/** Retry-After of a refusal that passes in `waitMs`: whole seconds, at least 1. */
export function retryAfterField(waitMs: number): [string, string] {
  return ['Retry-After', String(Math.max(1, ceilSeconds(waitMs)))];
}

/** A structured-field string (RFC 8941): quoted, `\` and `"` escaped. */
function sfString(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/** Whole seconds, rounded up (0 for none). */
function ceilSeconds(ms: number): number {
  return ms <= 0 ? 0 : Math.ceil(ms / 1000);
}
