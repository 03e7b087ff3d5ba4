/**
 * Usage charged after the response, through Envoy's API from a grpc-js client built from the published
 * protos, time driven by DEBUG CLOCK:
 * - a limit marked `allow_debt` (in the YAML, and over xDS in the descriptor's `metadata.cellgate`)
 *   records a charge beyond what is left (Envoy AI Gateway's token count, sent as the descriptor's
 *   hits_addend when the response is done): a token bucket of 100 a minute, full, charged 5,000, owes
 *   4,900 tokens; the check made before the next request (hits_addend 0) is OVER_LIMIT until the debt
 *   is repaid and one token is back, exactly 4,900.01 minutes' worth of refill later (2,940,600 ms);
 * - the same limit unmarked keeps the rule that a refused charge spends nothing;
 * - a descriptor's hits_addend is counted by a fixed window however large, up to 2^63 − 1 (beyond 2^52
 *   the window's count saturates: over for the rest of the window), and refused beyond 2^63 − 1 (as
 *   envoyproxy/ratelimit fails the call there).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient, startRls, T0, until, type Rls } from './helpers.js';
import { oneLimit, startXdsCellgate, type XdsCellgate } from './xds-helpers.js';
import { resource, XdsTestServer } from './xds-server.js';

const CONFIG = `
domain: ai
descriptors:
  - key: model
    value: debt
    rate_limit: { unit: minute, requests_per_unit: 100, algorithm: token_bucket, allow_debt: true }
  - key: model
    value: plain
    rate_limit: { unit: minute, requests_per_unit: 100, algorithm: token_bucket }
  - key: window
    rate_limit: { unit: minute, requests_per_unit: 10 }
`;

/** One limit of 100 tokens a minute, charged 5,000 when full: 4,900 owed, then one token, at 100 a minute. */
const REPAID_MS = 2_940_600;

type Hits = number | string;
const descriptor = (key: string, value: string | undefined, hits: Hits): unknown => ({
  entries: [value === undefined ? { key } : { key, value }], hits_addend: { value: hits },
});

describe('charges after the response (allow_debt) and hits_addend up to 2^63 - 1', () => {
  let rls: Rls;
  beforeAll(async () => {
    rls = await startRls({ 'ai.yaml': CONFIG });
  });
  afterAll(async () => {
    await rls?.stop();
  });

  const call = (key: string, value: string | undefined, hits: Hits) => rls.should('ai', [descriptor(key, value, hits) as never]);
  const at = (ms: number) => rls.redis.call('DEBUG', 'CLOCK', 'SET', String(ms));

  it('a token bucket marked allow_debt with 100 left records a charge of 5,000: OVER_LIMIT until exactly repaid', async () => {
    await at(T0);
    expect((await call('model', 'debt', 0)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 100 });
    // The charge after the response: recorded, and the reply says the limit was exceeded.
    expect((await call('model', 'debt', 5000)).statuses[0].code).toBe('OVER_LIMIT');
    // The check before the next request (a look, as a gateway's request-time cost of 0).
    expect((await call('model', 'debt', 0)).statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limit_remaining: 0 });
    await at(T0 + 60_000);
    expect((await call('model', 'debt', 0)).statuses[0].code).toBe('OVER_LIMIT');
    await at(T0 + REPAID_MS - 1);
    expect((await call('model', 'debt', 0)).statuses[0].code).toBe('OVER_LIMIT');
    await at(T0 + REPAID_MS);
    expect((await call('model', 'debt', 0)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 1 });
    expect((await call('model', 'debt', 1)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 0 });
  });

  it('the same limit unmarked: the charge of 5,000 is refused and spends nothing', async () => {
    await at(T0);
    expect((await call('model', 'plain', 5000)).statuses[0].code).toBe('OVER_LIMIT');
    expect((await call('model', 'plain', 1)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 99 });
  });

  // Fails before the fix on its second call: the addend above 2^52 was refused without being counted
  // (the window's stand-in limit is 2^52), so the next request of the window was OK.
  it('a fixed window counts a hits_addend above 2^52: the next request of the window is OVER_LIMIT', async () => {
    await at(T0 + 3 * 60_000);
    expect((await call('window', undefined, '4503599627370497')).statuses[0].code).toBe('OVER_LIMIT');
    expect((await call('window', undefined, 1)).statuses[0].code).toBe('OVER_LIMIT');
    // The next window starts empty.
    await at(T0 + 4 * 60_000);
    expect((await call('window', undefined, 1)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 9 });
  });

  it('2^63 - 1 is counted too; 2^63 and 2^64 - 1 fail the call, and count nothing', async () => {
    await at(T0 + 5 * 60_000);
    expect((await call('window', undefined, '9223372036854775807')).statuses[0].code).toBe('OVER_LIMIT');
    expect((await call('window', undefined, 0)).statuses[0].code).toBe('OVER_LIMIT');
    await at(T0 + 6 * 60_000);
    for (const hits of ['9223372036854775808', '18446744073709551615']) {
      const e = await rls.shouldFail({ domain: 'ai', descriptors: [descriptor('window', undefined, hits)] });
      expect(e.code).toBe(grpc.status.UNKNOWN);
      expect(e.details).toContain('hits_addend is above 2^63-1');
    }
    expect((await call('window', undefined, 1)).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 9 });
  });
});

describe('allow_debt over xDS (metadata.cellgate)', () => {
  const xds = new XdsTestServer();
  let cg: XdsCellgate;
  let client: grpc.Client;
  beforeAll(async () => {
    await xds.start();
    cg = await startXdsCellgate(xds.port);
    client = new RateLimitServiceClient(`127.0.0.1:${cg.rlsPort}`, grpc.credentials.createInsecure());
  });
  afterAll(async () => {
    client?.close();
    await cg?.stop();
    xds.stop();
  });

  const code = (hits: number): Promise<string> => new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).ShouldRateLimit({ domain: 'tokens', descriptors: [{ entries: [{ key: 'k', value: 'u' }], hits_addend: { value: hits } }] },
      { deadline: Date.now() + 10_000 }, (e: grpc.ServiceError | null, r: { overall_code: string }) => (e ? reject(e) : resolve(r.overall_code)));
  });

  it('a token bucket pushed with allow_debt records the charge after the fact; NACKed when not a boolean', async () => {
    const cellgate = (fields: Record<string, unknown>): Record<string, unknown> => ({ metadata: { fields: { cellgate: { structValue: { fields } } } } });
    xds.push('d1', [resource(oneLimit('tokens', 'tokens', 100, cellgate({ algorithm: { stringValue: 'token_bucket' }, allow_debt: { boolValue: true } })))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'd1', 'd1 in force');
    await cg.redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
    expect(await code(5000)).toBe('OVER_LIMIT');
    expect(await code(0)).toBe('OVER_LIMIT');
    await cg.redis.call('DEBUG', 'CLOCK', 'SET', String(T0 + REPAID_MS - 1));
    expect(await code(0)).toBe('OVER_LIMIT');
    await cg.redis.call('DEBUG', 'CLOCK', 'SET', String(T0 + REPAID_MS));
    expect(await code(0)).toBe('OK');
    xds.push('d2', [resource(oneLimit('tokens', 'tokens', 100, cellgate({ allow_debt: { stringValue: 'yes' } })))]);
    const nonce = xds.lastNonce;
    await until(() => xds.answersTo(nonce).length > 0, 'the NACK of d2');
    expect(xds.answersTo(nonce)[0].error_detail?.message).toContain("'allow_debt' must be true or false");
  });
});
