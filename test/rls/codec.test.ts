/**
 * The hand-written protobuf codec of ShouldRateLimit (src/rls/codec.ts) against protobufjs through
 * @grpc/proto-loader on Envoy's own .proto files: the same messages both ways, and hostile bytes
 * never make it throw anything but CodecError.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { CodecError, decodeRateLimitRequest, encodeRateLimitResponse } from '../../src/rls/codec.js';
import { PROTO_DIR } from './helpers.js';

const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true });
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const method = (grpc.loadPackageDefinition(def) as any).envoy.service.ratelimit.v3.RateLimitService.service.ShouldRateLimit;
const encodeRequest = (r: unknown): Buffer => method.requestSerialize(r);
const decodeResponse = (b: Buffer) => method.responseDeserialize(b);

const text = fc.string({ maxLength: 20 });
const UNITS = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'WEEK', 'MONTH', 'YEAR'];
/** A descriptor's override has envoy.type.v3.RateLimitUnit, which has no WEEK. */
const OVERRIDE_UNITS = UNITS.filter((u) => u !== 'WEEK');

describe('requests: decoded as protobufjs encodes them', () => {
  it('random requests', () => {
    fc.assert(fc.property(
      text, fc.nat(4294967295),
      fc.array(fc.record({
        entries: fc.array(fc.record({ key: text, value: text }), { maxLength: 4 }),
        limit: fc.option(fc.record({ requests_per_unit: fc.nat(4294967295), unit: fc.constantFrom(...OVERRIDE_UNITS) }), { nil: undefined }),
        hits_addend: fc.option(fc.record({ value: fc.nat(Number.MAX_SAFE_INTEGER) }), { nil: undefined }),
      }), { maxLength: 5 }),
      (domain, hits, descriptors) => {
        const got = decodeRateLimitRequest(encodeRequest({ domain, hits_addend: hits, descriptors }));
        expect(got.domain).toBe(domain);
        expect(got.hits_addend).toBe(hits);
        expect(got.descriptors.length).toBe(descriptors.length);
        descriptors.forEach((d, i) => {
          expect(got.descriptors[i].entries).toEqual(d.entries);
          expect(got.descriptors[i].limit ?? undefined).toEqual(d.limit);
          expect(got.descriptors[i].hits_addend ?? undefined).toEqual(d.hits_addend);
        });
      },
    ), { numRuns: 300 });
  });
});

describe('responses: encoded as protobufjs decodes them', () => {
  it('random responses', () => {
    fc.assert(fc.property(
      fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
      fc.array(fc.record({
        code: fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
        current_limit: fc.option(fc.record({ requests_per_unit: fc.nat(4294967295), unit: fc.constantFrom(...UNITS), name: fc.string({ maxLength: 200 }) }), { nil: null }),
        limit_remaining: fc.nat(4294967295),
        duration_until_reset: fc.option(fc.record({ seconds: fc.nat(31_536_000), nanos: fc.nat(999_999_999) }), { nil: null }),
      }), { maxLength: 6 }),
      fc.array(fc.record({ key: fc.string({ maxLength: 300 }), value: text }), { maxLength: 3 }),
      (overall, statuses, headers) => {
        const r = decodeResponse(encodeRateLimitResponse({ overall_code: overall, statuses, response_headers_to_add: headers }));
        expect(r.overall_code).toBe(overall);
        expect(r.statuses.map((s: { code: string; current_limit: unknown; limit_remaining: number; duration_until_reset: unknown }) =>
          ({ code: s.code, current_limit: s.current_limit, limit_remaining: s.limit_remaining, duration_until_reset: s.duration_until_reset }))).toEqual(statuses);
        expect(r.response_headers_to_add.map((h: { key: string; value: string }) => ({ key: h.key, value: h.value }))).toEqual(headers);
      },
    ), { numRuns: 300 });
  });
});

describe('hostile bytes', () => {
  it('random bytes: a request or a CodecError, nothing else', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      try {
        decodeRateLimitRequest(Buffer.from(bytes));
      } catch (e) {
        expect(e).toBeInstanceOf(CodecError);
      }
    }), { numRuns: 2000 });
  });
  it('truncated and overlong fields are refused', () => {
    expect(() => decodeRateLimitRequest(Buffer.from([0x0a, 0x05, 0x61]))).toThrow('length beyond the message');
    expect(() => decodeRateLimitRequest(Buffer.from([0x18, 0xff]))).toThrow('truncated varint');
    expect(() => decodeRateLimitRequest(Buffer.from([0x18, ...new Array(11).fill(0xff)]))).toThrow('varint longer than 10 bytes');
    expect(() => decodeRateLimitRequest(Buffer.from([0x23]))).toThrow('wire type 3 not accepted');
    expect(() => decodeRateLimitRequest(Buffer.from([0x0b]))).toThrow('wire type 3 where 2 is expected');
    expect(() => decodeRateLimitRequest(Buffer.from([0x08, 0x01]))).toThrow('wire type 0 where 2 is expected');
  });
  it('a megabyte of nested descriptors decodes in linear time', () => {
    const one = encodeRequest({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
    const many = Buffer.concat(Array.from({ length: 50_000 }, () => one));
    const r = decodeRateLimitRequest(many);
    expect(r.descriptors.length).toBe(50_000);
  });
});
