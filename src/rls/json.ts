/**
 * envoyproxy/ratelimit's `POST /json` (on cellgate's metrics port): a RateLimitRequest in protobuf's
 * JSON mapping in, the RateLimitResponse out in the same mapping (lowerCamelCase names, zero values
 * left out, 64-bit integers as strings, a Duration as "60s"). 200 for OK, 429 for OVER_LIMIT; a body
 * that is not a request, or a request the service refuses, is a 400 with "Bad Request", as there.
 */
import type { DescriptorStatus, RateLimitRequest, RateLimitResponse } from './service.js';

export class JsonRequestError extends Error {}

type Json = Record<string, unknown>;

const UNITS = new Set(['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK']);
const UNIT_BY_NUMBER = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'];

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A field by its JSON name or its proto name (protojson accepts both); refuses names of neither. */
function fields(v: unknown, what: string, names: Record<string, string>): Json {
  if (!isObject(v)) throw new JsonRequestError(`${what} must be an object`);
  const out: Json = {};
  for (const [k, value] of Object.entries(v)) {
    const proto = names[k];
    if (proto === undefined) throw new JsonRequestError(`unknown field '${k.slice(0, 64)}' in ${what}`);
    if (value !== null) out[proto] = value;
  }
  return out;
}

function str(v: unknown, what: string): string {
  if (v === undefined) return '';
  if (typeof v !== 'string') throw new JsonRequestError(`${what} must be a string`);
  return v;
}

/** An unsigned integer: a JSON number or a decimal string, as protojson takes 32- and 64-bit ones. */
function uint(v: unknown, what: string, max: number): number {
  if (v === undefined) return 0;
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < 0 || n > max) throw new JsonRequestError(`${what} must be an integer between 0 and ${max}`);
  return n;
}

/** Parses the body into the service's request shape; throws JsonRequestError. */
export function parseJsonRequest(body: string): RateLimitRequest {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch {
    throw new JsonRequestError('not JSON');
  }
  const r = fields(raw, 'the request', { domain: 'domain', descriptors: 'descriptors', hitsAddend: 'hits_addend', hits_addend: 'hits_addend' });
  const list = r.descriptors ?? [];
  if (!Array.isArray(list)) throw new JsonRequestError('descriptors must be a list');
  const descriptors = list.map((d, i) => {
    const f = fields(d, `descriptors[${i}]`, { entries: 'entries', limit: 'limit', hitsAddend: 'hits_addend', hits_addend: 'hits_addend' });
    const entries = f.entries ?? [];
    if (!Array.isArray(entries)) throw new JsonRequestError(`descriptors[${i}].entries must be a list`);
    let limit: { requests_per_unit: number; unit: string } | null = null;
    if (f.limit !== undefined) {
      const l = fields(f.limit, `descriptors[${i}].limit`, { requestsPerUnit: 'requests_per_unit', requests_per_unit: 'requests_per_unit', unit: 'unit' });
      const unit = typeof l.unit === 'number' ? UNIT_BY_NUMBER[l.unit] : l.unit ?? 'UNKNOWN';
      if (typeof unit !== 'string' || !UNITS.has(unit)) throw new JsonRequestError(`descriptors[${i}].limit.unit is not a unit`);
      limit = { requests_per_unit: uint(l.requests_per_unit, 'requestsPerUnit', 4294967295), unit };
    }
    return {
      entries: entries.map((e, j) => {
        const ef = fields(e, `descriptors[${i}].entries[${j}]`, { key: 'key', value: 'value' });
        return { key: str(ef.key, 'key'), value: str(ef.value, 'value') };
      }),
      limit,
      hits_addend: f.hits_addend === undefined ? null : { value: uint(f.hits_addend, 'hitsAddend', Number.MAX_SAFE_INTEGER) },
    };
  });
  return { domain: str(r.domain, 'domain'), descriptors, hits_addend: uint(r.hits_addend, 'hitsAddend', 4294967295) };
}

function durationText(d: { seconds: number; nanos: number }): string {
  if (d.nanos === 0) return `${d.seconds}s`;
  return `${d.seconds}.${String(d.nanos).padStart(9, '0').replace(/0+$/, '')}s`;
}

function statusJson(s: DescriptorStatus): Json {
  const out: Json = {};
  if (s.code !== 'OK') out.code = s.code;
  else out.code = 'OK';
  if (s.current_limit !== null) {
    const l: Json = {};
    if (s.current_limit.name !== '') l.name = s.current_limit.name;
    if (s.current_limit.requests_per_unit !== 0) l.requestsPerUnit = s.current_limit.requests_per_unit;
    if (s.current_limit.unit !== '') l.unit = s.current_limit.unit;
    out.currentLimit = l;
  }
  if (s.limit_remaining !== 0) out.limitRemaining = s.limit_remaining;
  if (s.duration_until_reset !== null) out.durationUntilReset = durationText(s.duration_until_reset);
  return out;
}

/** The response in protobuf's JSON mapping. */
export function responseJson(r: RateLimitResponse): string {
  const out: Json = { overallCode: r.overall_code };
  if (r.statuses.length > 0) out.statuses = r.statuses.map(statusJson);
  if (r.response_headers_to_add.length > 0) out.responseHeadersToAdd = r.response_headers_to_add.map((h) => ({ key: h.key, value: h.value }));
  return JSON.stringify(out);
}
