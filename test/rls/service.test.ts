/**
 * ShouldRateLimit against a real server, from a client built from Envoy's .proto files: every
 * configuration feature answers as envoyproxy/ratelimit does, time driven by DEBUG CLOCK.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { counter, HealthClient, startRls, T0, type Rls } from './helpers.js';

const CONFIG = `
domain: app
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: k
    value: vip
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: free
    value: pass
  - key: u
    rate_limit: { unlimited: true }
  - key: wild
    value: a*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: shared
    value: files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tb
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: token_bucket }
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding_window }
  - key: sl
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding_log }
  - key: lb
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: leaky_bucket }
  - key: gc
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: gcra, burst: 2 }
  - key: nest
    value: a
    descriptors:
      - key: sub
        rate_limit: { unit: second, requests_per_unit: 1 }
  - key: loose
    rate_limit: { unit: minute, requests_per_unit: 1, name: loose }
  - key: year
    rate_limit: { unit: year, requests_per_unit: 4000000000 }
  - key: quota
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tight
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: tight
      replaces: [{ name: loose }]
`;

let rls: Rls;
beforeAll(async () => {
  rls = await startRls({ 'app.yaml': CONFIG, 'notes.txt': 'not yaml: ignored' });
});
afterAll(async () => {
  await rls?.stop();
});

const one = (key: string, value = 'x') => [{ entries: [{ key, value }] }];

describe('fixed windows, as envoyproxy/ratelimit', () => {
  it('counts per key_value in a window aligned to the unit, an over-limit hit counted too', async () => {
    const a = await rls.should('app', one('k', 'user1'));
    expect(a.overall_code).toBe('OK');
    expect(a.statuses[0]).toEqual({ code: 'OK', current_limit: { requests_per_unit: 2, unit: 'MINUTE', name: '' }, limit_remaining: 1, duration_until_reset: { seconds: 60, nanos: 0 } });
    expect((await rls.should('app', one('k', 'user1'))).statuses[0].limit_remaining).toBe(0);
    const over = await rls.should('app', one('k', 'user1'));
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limit_remaining: 0 });
    // Another value of the same key: its own counter.
    expect((await rls.should('app', one('k', 'user2'))).statuses[0].limit_remaining).toBe(1);
    // envoyproxy/ratelimit's cache key, holding the count (3: INCRBY counts the refused hit too).
    const key = `app_k_user1_${T0 / 1000}`;
    expect(await rls.redis.exists(key)).toBe(1);
    expect(await rls.redis.pttl(key)).toBe(60_000);
    // A look without counting (descriptor hits_addend 0) still sees 3 > 2.
    const look = await rls.should('app', [{ entries: [{ key: 'k', value: 'user1' }], hits_addend: { value: 0 } }]);
    expect(look.statuses[0].code).toBe('OVER_LIMIT');
  });

  it('any uint32 limit of any unit, as envoyproxy/ratelimit', async () => {
    const r = await rls.should('app', one('year'), 1000);
    expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 4000000000, unit: 'YEAR' }, limit_remaining: 3999999000 });
  });

  it('duration_until_reset runs to the end of the unit; the next window starts empty', async () => {
    await rls.redis.call('DEBUG', 'CLOCK', 'ADVANCE', '15000');
    const r = await rls.should('app', one('k', 'user3'));
    expect(r.statuses[0].duration_until_reset).toEqual({ seconds: 45, nanos: 0 });
    await rls.redis.call('DEBUG', 'CLOCK', 'ADVANCE', '45000');
    expect((await rls.should('app', one('k', 'user1'))).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 1 });
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  });

  it('hits_addend: the request\'s, and a descriptor\'s own overriding it', async () => {
    const r = await rls.should('app', one('k', 'vip'), 3);
    expect(r.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 2 });
    const r2 = await rls.should('app', [{ entries: [{ key: 'k', value: 'vip' }], hits_addend: { value: 1 } }], 50);
    expect(r2.statuses[0].limit_remaining).toBe(1);
    expect((await rls.should('app', one('k', 'vip'), 2)).overall_code).toBe('OVER_LIMIT');
  });

  it('a per-descriptor limit override wins, counted under the whole descriptor', async () => {
    const d = [{ entries: [{ key: 'k', value: 'ovr' }], limit: { requests_per_unit: 1, unit: 'HOUR' } }];
    const r = await rls.should('app', d);
    expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 1, unit: 'HOUR' }, limit_remaining: 0, duration_until_reset: { seconds: 3600 } });
    expect((await rls.should('app', d)).overall_code).toBe('OVER_LIMIT');
  });
});

describe('matching', () => {
  it('no match, a value without a limit, an unknown domain: OK with no current_limit', async () => {
    for (const r of [await rls.should('app', one('nothing')), await rls.should('app', one('free', 'pass')), await rls.should('elsewhere', one('k'))]) {
      expect(r.overall_code).toBe('OK');
      expect(r.statuses[0]).toEqual({ code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null });
    }
  });
  it('unlimited: OK, remaining the largest uint32', async () => {
    const r = await rls.should('app', one('u'));
    expect(r.statuses[0]).toEqual({ code: 'OK', current_limit: null, limit_remaining: 4294967295, duration_until_reset: null });
  });
  it('nested descriptors: the limit of the deepest level, per second', async () => {
    const d = [{ entries: [{ key: 'nest', value: 'a' }, { key: 'sub', value: 's1' }] }];
    expect((await rls.should('app', d)).statuses[0]).toMatchObject({ code: 'OK', current_limit: { unit: 'SECOND', requests_per_unit: 1 }, limit_remaining: 0 });
    expect((await rls.should('app', d)).overall_code).toBe('OVER_LIMIT');
    // The first level alone has no limit.
    expect((await rls.should('app', [{ entries: [{ key: 'nest', value: 'a' }] }])).statuses[0].current_limit).toBeNull();
  });
  it('wildcard without share_threshold: each value counts apart', async () => {
    expect((await rls.should('app', one('wild', 'a1'))).overall_code).toBe('OK');
    expect((await rls.should('app', one('wild', 'a2'))).overall_code).toBe('OK');
    expect((await rls.should('app', one('wild', 'a1'))).overall_code).toBe('OVER_LIMIT');
    expect((await rls.should('app', one('wild', 'b1'))).statuses[0].current_limit).toBeNull();
  });
  it('wildcard with share_threshold: every value of the pattern shares one counter', async () => {
    expect((await rls.should('app', one('shared', 'files/a'))).overall_code).toBe('OK');
    expect((await rls.should('app', one('shared', 'files/b'))).overall_code).toBe('OVER_LIMIT');
    expect(await rls.redis.exists(`app_shared_files/*_${T0 / 1000}`)).toBe(1);
  });
  it('every descriptor must pass: one over makes the answer OVER_LIMIT, the others still counted', async () => {
    const r = await rls.should('app', [...one('k', 'multi'), ...one('wild', 'a1')]);
    expect(r.overall_code).toBe('OVER_LIMIT');
    expect(r.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
    expect(r.statuses[0].limit_remaining).toBe(1);
  });
  it('replaces: a limit named in another matched limit\'s replaces is not applied', async () => {
    expect((await rls.should('app', one('loose'))).overall_code).toBe('OK');
    expect((await rls.should('app', one('loose'))).overall_code).toBe('OVER_LIMIT');
    const r = await rls.should('app', [...one('loose'), ...one('tight')]);
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0]).toEqual({ code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null });
  });
});

describe('quota mode', () => {
  it('an over quota descriptor fails the request only when every quota descriptor of it is over', async () => {
    await rls.should('app', one('quota', 'q1'));
    const partly = await rls.should('app', [...one('quota', 'q1'), ...one('quota', 'q2')]);
    expect(partly.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    expect(partly.overall_code).toBe('OK');
    const all = await rls.should('app', [...one('quota', 'q1'), ...one('quota', 'q2')]);
    expect(all.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(all.overall_code).toBe('OVER_LIMIT');
  });
});

describe('shadow mode', () => {
  it('a shadow_mode limit answers OK when over, and counts it', async () => {
    await rls.should('app', one('shadow'));
    const r = await rls.should('app', one('shadow'));
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 0 });
    const m = await rls.metrics();
    expect(counter(m, 'ratelimit_service_rate_limit_shadow_mode{domain="app",key1="shadow"}')).toBe(1);
    expect(counter(m, 'ratelimit_service_rate_limit_over_limit{domain="app",key1="shadow"}')).toBe(1);
  });
  it('rls-shadow-mode: every over-limit answer becomes OK (statuses keep their code), counted', async () => {
    await rls.redis.call('CONFIG', 'SET', 'rls-shadow-mode', 'yes');
    const r = await rls.should('app', one('wild', 'a1'));
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0].code).toBe('OVER_LIMIT');
    expect(counter(await rls.metrics(), 'ratelimit_service_global_shadow_mode')).toBe(1);
    await rls.redis.call('CONFIG', 'SET', 'rls-shadow-mode', 'no');
    expect((await rls.should('app', one('wild', 'a1'))).overall_code).toBe('OVER_LIMIT');
  });
});

describe('cellgate\'s algorithms', () => {
  it('token_bucket: a burst of 2, then one per 30 s', async () => {
    expect((await rls.should('app', one('tb'))).statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 1 });
    expect((await rls.should('app', one('tb'))).overall_code).toBe('OK');
    const over = await rls.should('app', one('tb'));
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses[0].duration_until_reset).toEqual({ seconds: 60, nanos: 0 });
    await rls.redis.call('DEBUG', 'CLOCK', 'ADVANCE', '30000');
    expect((await rls.should('app', one('tb'))).overall_code).toBe('OK');
    expect((await rls.should('app', one('tb'))).overall_code).toBe('OVER_LIMIT');
    expect(await rls.redis.type('app_tb_x_')).toBe('tokenbucket');
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  });
  it('sliding_log, leaky_bucket, gcra: 2 a minute, the third refused, each key of its own type', async () => {
    for (const [key, type] of [['sl', 'slidinglog'], ['lb', 'leakybucket'], ['gc', 'gcra']]) {
      expect((await rls.should('app', one(key))).overall_code).toBe('OK');
      expect((await rls.should('app', one(key))).overall_code).toBe('OK');
      const over = await rls.should('app', one(key));
      expect(over.overall_code).toBe('OVER_LIMIT');
      expect(over.statuses[0].limit_remaining).toBe(0);
      expect(await rls.redis.type(`app_${key}_x_`)).toBe(type);
    }
  });
  it('sliding_window: no reset at the minute boundary', async () => {
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0 + 50_000));
    await rls.should('app', one('sw'));
    await rls.should('app', one('sw'));
    expect((await rls.should('app', one('sw'))).overall_code).toBe('OVER_LIMIT');
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0 + 61_000));
    // A fixed window would start empty here; the sliding window still weighs the last minute's 2.
    expect((await rls.should('app', one('sw'))).overall_code).toBe('OVER_LIMIT');
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  });
});

describe('response headers', () => {
  it('off by default; rls-response-headers adds limit, remaining, reset of the closest limit', async () => {
    expect((await rls.should('app', one('k', 'h1'))).response_headers_to_add).toEqual([]);
    await rls.redis.call('CONFIG', 'SET', 'rls-response-headers', 'yes');
    await rls.redis.call('DEBUG', 'CLOCK', 'ADVANCE', '10000');
    const r = await rls.should('app', [...one('k', 'h1'), ...one('k', 'vip2')]);
    expect(r.response_headers_to_add).toEqual([
      { key: 'RateLimit-Limit', value: '2' }, { key: 'RateLimit-Remaining', value: '0' }, { key: 'RateLimit-Reset', value: '50' },
    ]);
    await rls.redis.call('CONFIG', 'SET', 'rls-header-names', 'x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset');
    const r2 = await rls.should('app', one('k', 'h2'));
    expect(r2.response_headers_to_add.map((h) => h.key)).toEqual(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']);
    await rls.redis.call('CONFIG', 'SET', 'rls-response-headers', 'no');
    await rls.redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  });
});

describe('refusals, errors', () => {
  it('an empty domain or no descriptors: UNKNOWN with envoyproxy/ratelimit\'s text, counted', async () => {
    const e1 = await rls.shouldFail({ domain: '', descriptors: one('k') });
    expect(e1.code).toBe(grpc.status.UNKNOWN);
    expect(e1.details).toBe('rate limit domain must not be empty');
    const e2 = await rls.shouldFail({ domain: 'app', descriptors: [] });
    expect(e2.details).toBe('rate limit descriptor list must not be empty');
    expect(counter(await rls.metrics(), 'ratelimit_service_should_rate_limit_error{err_type="service_error"}')).toBeGreaterThanOrEqual(2);
  });
});

describe('the rest of the surface', () => {
  it('POST /json on the metrics port: 200 OK, 429 OVER_LIMIT, 400 for a bad body', async () => {
    const post = (body: string) => fetch(`http://127.0.0.1:${rls.metricsPort}/json`, { method: 'POST', body });
    const ok = await post(JSON.stringify({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'json1' }] }] }));
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ overallCode: 'OK', statuses: [{ code: 'OK', currentLimit: { requestsPerUnit: 2, unit: 'MINUTE' }, limitRemaining: 1, durationUntilReset: '60s' }] });
    const over = await post(JSON.stringify({ domain: 'app', hitsAddend: 2, descriptors: [{ entries: [{ key: 'k', value: 'json1' }] }] }));
    expect(over.status).toBe(429);
    expect(((await over.json()) as { overallCode: string }).overallCode).toBe('OVER_LIMIT');
    expect((await post('{not json')).status).toBe(400);
    expect((await post(JSON.stringify({ domain: 'app', descriptors: [{ entries: [{ key: 'k' }], bogus: 1 }] }))).status).toBe(400);
    expect((await post(JSON.stringify({ domain: '', descriptors: [] }))).status).toBe(400);
    expect((await fetch(`http://127.0.0.1:${rls.metricsPort}/json`)).status).toBe(405);
    const huge = await post('{"domain":"' + 'x'.repeat(2 * 1024 * 1024) + '"}').catch(() => null);
    // Answered 413 and closed, or closed while the body was still going out: never served.
    if (huge !== null) expect(huge.status).toBe(413);
    expect((await post(JSON.stringify({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'json2' }] }] }))).status).toBe(200);
  });
  it('grpc.health.v1.Health/Check: SERVING for "" and the service, NOT_FOUND for another', async () => {
    const h = new HealthClient(`127.0.0.1:${rls.rlsPort}`, grpc.credentials.createInsecure());
    const check = (service: string) => new Promise<{ status: string }>((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (h as any).Check({ service }, (e: Error | null, r: { status: string }) => (e ? reject(e) : resolve(r)));
    });
    expect((await check('')).status).toBe('SERVING');
    expect((await check('envoy.service.ratelimit.v3.RateLimitService')).status).toBe('SERVING');
    await expect(check('nope')).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
    h.close();
  });
  it('the settings show in CONFIG GET; /readyz is ready with a configuration loaded', async () => {
    const got = (await rls.redis.call('CONFIG', 'GET', 'rls-*')) as string[];
    expect(got).toContain('rls-port');
    expect(got[got.indexOf('rls-port') + 1]).toBe(String(rls.rlsPort));
    expect(got[got.indexOf('rls-config') + 1]).toBe(rls.configDir);
    expect((await fetch(`http://127.0.0.1:${rls.metricsPort}/readyz`)).status).toBe(200);
  });
  it('counters per domain and descriptor key as envoyproxy/ratelimit names them', async () => {
    const m = await rls.metrics();
    // k_vip (5 per minute) saw 3, 1, then 2 hits: the last pair took the count from 4 to 6, one hit
    // over the limit and one in the near-limit band (above 80% of 5), as envoyproxy/ratelimit counts.
    expect(counter(m, 'ratelimit_service_rate_limit_total_hits{domain="app",key1="k_vip"}')).toBe(6);
    expect(counter(m, 'ratelimit_service_rate_limit_over_limit{domain="app",key1="k_vip"}')).toBe(1);
    expect(counter(m, 'ratelimit_service_rate_limit_near_limit{domain="app",key1="k_vip"}')).toBe(1);
    expect(counter(m, 'ratelimit_service_rate_limit_within_limit{domain="app",key1="k_vip"}')).toBe(4);
    expect(counter(m, 'ratelimit_service_config_load_success')).toBe(1);
    expect(counter(m, 'ratelimit_service_rate_limit_domain_not_found{domain="elsewhere"}')).toBe(1);
    expect(m).toContain('cellgate_rls_request_duration_seconds_count');
  });
});
