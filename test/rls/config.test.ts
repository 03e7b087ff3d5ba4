/**
 * The rate limit service's configuration (src/rls/config.ts): envoyproxy/ratelimit's YAML rules,
 * its validation errors (with the file and the place named), its matching, and cellgate's
 * `algorithm`/`burst` extension. Fixtures follow envoyproxy/ratelimit's test/config/*.yaml.
 */
import { describe, expect, it } from 'vitest';
import { loadRlsConfig, RlsConfigError, type RequestEntry } from '../../src/rls/config.js';

const BASIC = `
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: key2
    value: value3
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25
`;

function load(text: string, name = 'config.yaml') {
  return loadRlsConfig([{ name, text }]);
}

function refusal(text: string, name = 'bad.yaml'): string {
  try {
    load(text, name);
  } catch (e) {
    expect(e).toBeInstanceOf(RlsConfigError);
    return (e as Error).message;
  }
  throw new Error('loaded, expected a refusal');
}

const E = (...pairs: [string, string][]): RequestEntry[] => pairs.map(([key, value]) => ({ key, value }));

describe('matching (most specific wins)', () => {
  const c = load(BASIC);
  it('an unknown domain or descriptor matches nothing', () => {
    expect(c.getLimit('other', E(['key2', 'x']), null)).toBeNull();
    expect(c.getLimit('test-domain', E(['nope', 'x']), null)).toBeNull();
  });
  it('key_value wins over the bare key, which is the default for other values', () => {
    expect(c.getLimit('test-domain', E(['key2', 'value2']), null)!.limit.requestsPerUnit).toBe(30);
    const d = c.getLimit('test-domain', E(['key2', 'other']), null)!;
    expect(d.limit.requestsPerUnit).toBe(20);
    expect(d.limit.unit).toBe('MINUTE');
    expect(d.limit.unitSeconds).toBe(60);
    expect(d.statsKey).toBe('test-domain.key2');
  });
  it('a key_value without rate_limit allows everything (no limit)', () => {
    expect(c.getLimit('test-domain', E(['key2', 'value3']), null)).toBeNull();
  });
  it('nested: two levels, the second chosen the same way', () => {
    expect(c.getLimit('test-domain', E(['key1', 'value1'], ['subkey1', 'x']), null)!.limit.requestsPerUnit).toBe(5);
    const m = c.getLimit('test-domain', E(['key1', 'value1'], ['subkey1', 'subvalue1']), null)!;
    expect(m.limit.requestsPerUnit).toBe(10);
    expect(m.statsKey).toBe('test-domain.key1_value1.subkey1_subvalue1');
  });
  it('a limit applies only to a descriptor that ends at its level', () => {
    expect(c.getLimit('test-domain', E(['key1', 'value1']), null)).toBeNull();
    expect(c.getLimit('test-domain', E(['key5', 'value5']), null)!.limit.requestsPerUnit).toBe(15);
    expect(c.getLimit('test-domain', E(['key5', 'value5'], ['subkey5', 'subvalue5']), null)!.limit.requestsPerUnit).toBe(25);
    expect(c.getLimit('test-domain', E(['key3', 'x'], ['more', 'y']), null)).toBeNull();
  });
  it('name is kept', () => {
    expect(c.getLimit('test-domain', E(['key4', 'x']), null)!.limit.name).toBe('key4_rate_limit');
  });
  it('a per-request override wins, as a fixed window keyed by the whole descriptor', () => {
    const m = c.getLimit('test-domain', E(['key2', 'value2'], ['b', '']), { requestsPerUnit: 7, unit: 'HOUR' })!;
    expect(m.limit).toMatchObject({ requestsPerUnit: 7, unit: 'HOUR', unitSeconds: 3600, algorithm: 'fixed_window', shadowMode: false });
    expect(m.statsKey).toBe('test-domain.key2_value2.b');
  });
});

describe('wildcards', () => {
  const c = load(`
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: midWild
    value: bar*b
    rate_limit: { unit: minute, requests_per_unit: 21 }
  - key: multiWild
    value: foo*bar*baz
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: { unit: minute, requests_per_unit: 22 }
`);
  it('a trailing * matches any suffix, the empty one included', () => {
    expect(c.getLimit('test-domain', E(['wild', 'foo1']), null)!.limit.requestsPerUnit).toBe(20);
    expect(c.getLimit('test-domain', E(['wild', 'foo']), null)!.limit.requestsPerUnit).toBe(20);
    expect(c.getLimit('test-domain', E(['wild', 'fo']), null)).toBeNull();
    expect(c.getLimit('test-domain', E(['nestedWild', 'val1'], ['wild', 'goo2']), null)!.limit.requestsPerUnit).toBe(22);
  });
  it('a * in the middle, and several', () => {
    expect(c.getLimit('test-domain', E(['midWild', 'barXb']), null)!.limit.requestsPerUnit).toBe(21);
    expect(c.getLimit('test-domain', E(['midWild', 'barXc']), null)).toBeNull();
    expect(c.getLimit('test-domain', E(['multiWild', 'foo1bar2baz']), null)!.limit.requestsPerUnit).toBe(10);
    expect(c.getLimit('test-domain', E(['multiWild', 'foobaz']), null)).toBeNull();
  });
  it('without share_threshold each value counts apart; with it, all values of the pattern share one counter', () => {
    expect(c.getLimit('test-domain', E(['wild', 'foo1']), null)!.sharePatterns).toBeNull();
    const m = c.getLimit('test-domain', E(['files', 'files/a.txt']), null)!;
    expect(m.sharePatterns).toEqual(['files/*']);
    expect(m.statsKey).toBe('test-domain.files_files/*');
  });
});

describe('metrics keys: detailed_metric and value_to_metric', () => {
  const c = load(`
domain: d
descriptors:
  - key: a
    detailed_metric: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: b
    value_to_metric: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: c
    rate_limit: { unit: second, requests_per_unit: 1 }
`);
  it('detailed_metric names the request values, value_to_metric the value of a bare key, else the config path', () => {
    expect(c.getLimit('d', E(['a', 'x1']), null)!.statsKey).toBe('d.a_x1');
    expect(c.getLimit('d', E(['b', 'y']), null)!.statsKey).toBe('d.b_y');
    expect(c.getLimit('d', E(['c', 'z']), null)!.statsKey).toBe('d.c');
  });
});

describe('flags and the extension', () => {
  it('shadow_mode, quota_mode, unlimited, replaces', () => {
    const c = load(`
domain: d
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: u
    rate_limit: { unlimited: true }
  - key: r
    rate_limit:
      name: tight
      unit: hour
      requests_per_unit: 5
      replaces: [{ name: loose }]
`);
    expect(c.getLimit('d', E(['s', '1']), null)!.limit.shadowMode).toBe(true);
    expect(c.getLimit('d', E(['u', '1']), null)!.limit).toMatchObject({ unlimited: true, unit: '' });
    expect(c.getLimit('d', E(['r', '1']), null)!.limit.replaces).toEqual(['loose']);
  });
  it('algorithm defaults to fixed_window; every algorithm and burst are accepted', () => {
    const c = load(`
domain: d
descriptors:
  - key: f
    rate_limit: { unit: second, requests_per_unit: 3 }
  - key: t
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10 }
  - key: g
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: GCRA }
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: sliding_window }
  - key: sl
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: sliding_log }
  - key: lb
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: leaky_bucket, burst: 2 }
`);
    expect(c.getLimit('d', E(['f', '']), null)!.limit.algorithm).toBe('fixed_window');
    expect(c.getLimit('d', E(['t', '']), null)!.limit).toMatchObject({ algorithm: 'token_bucket', burst: 10 });
    expect(c.getLimit('d', E(['g', '']), null)!.limit.algorithm).toBe('gcra');
    expect(c.getLimit('d', E(['sw', '']), null)!.limit.algorithm).toBe('sliding_window');
    expect(c.getLimit('d', E(['sl', '']), null)!.limit.algorithm).toBe('sliding_log');
    expect(c.getLimit('d', E(['lb', '']), null)!.limit.algorithm).toBe('leaky_bucket');
  });
  it('allow_debt marks a limit for charges after the fact; off by default; a boolean only', () => {
    const c = load(`
domain: d
descriptors:
  - key: t
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, allow_debt: true }
  - key: f
    rate_limit: { unit: minute, requests_per_unit: 60 }
`);
    expect(c.getLimit('d', E(['t', '']), null)!.limit.allowDebt).toBe(true);
    expect(c.getLimit('d', E(['f', '']), null)!.limit.allowDebt).toBe(false);
    expect(refusal('domain: d\ndescriptors:\n  - key: t\n    rate_limit: { unit: minute, requests_per_unit: 6, allow_debt: 1 }\n'))
      .toBe("bad.yaml: error loading config file: 'allow_debt' must be true or false (at descriptors[0].rate_limit.allow_debt)");
  });
  it('scalars in string fields are their text (yaml.v2 decodes them so); yes/no are booleans (YAML 1.1)', () => {
    const c = load('domain: 42\ndescriptors:\n  - key: k\n    value: 007\n    shadow_mode: yes\n    rate_limit: { unit: SECOND, requests_per_unit: 2 }\n');
    const m = c.getLimit('42', E(['k', '007']), null)!;
    expect(m.limit.shadowMode).toBe(true);
  });
});

describe('validation: refused with the file and the place named', () => {
  it('duplicate domain across files', () => {
    try {
      loadRlsConfig([{ name: 'a.yaml', text: 'domain: x\n' }, { name: 'b.yaml', text: 'domain: x\n' }]);
      throw new Error('loaded');
    } catch (e) {
      expect((e as Error).message).toBe("b.yaml: duplicate domain 'x' in config file (at domain)");
    }
  });
  it('empty domain', () => {
    expect(refusal('descriptors: []\n')).toBe('bad.yaml: config file cannot have empty domain (at domain)');
    expect(refusal('')).toBe('bad.yaml: config file cannot have empty domain');
  });
  it('duplicate key', () => {
    expect(refusal('domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n'))
      .toBe("bad.yaml: duplicate descriptor composite key 'test-domain.key1_value1' (at descriptors[1])");
  });
  it('empty key', () => {
    expect(refusal('domain: d\ndescriptors:\n  - value: v\n')).toBe('bad.yaml: descriptor has empty key (at descriptors[0].key)');
  });
  it('bad unit', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n'))
      .toBe("bad.yaml: invalid rate limit unit 'fortnight' (at descriptors[0].rate_limit.unit)");
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: unknown\n      requests_per_unit: 5\n'))
      .toContain("invalid rate limit unit 'unknown'");
  });
  it('unlimited with a unit', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n'))
      .toBe('bad.yaml: should not specify rate limit unit when unlimited (at descriptors[0].rate_limit.unit)');
  });
  it('replaces itself, and an empty replaces entry', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n'))
      .toBe('bad.yaml: replaces should not contain name of same descriptor (at descriptors[0].rate_limit.replaces[0])');
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      replaces:\n        - name: ""\n      unit: second\n      requests_per_unit: 5\n'))
      .toContain('should not have an empty replaces entry');
  });
  it('a misspelled key, anywhere', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n'))
      .toBe("bad.yaml: config error, unknown key 'requestsperunit' (at descriptors[0].rate_limit.requestsperunit)");
    expect(refusal('domain: d\ndescriptor:\n  - key: k\n')).toBe("bad.yaml: config error, unknown key 'descriptor' (at descriptor)");
  });
  it('a key that is not a string', () => {
    expect(refusal('0.25: test-domain\ndescriptors:\n  - key: key1\n')).toBe('bad.yaml: config error, key is not of type string: 0.25');
  });
  it('a list of something other than mappings', () => {
    expect(refusal('domain: d\ndescriptors:\n  - a\n')).toBe('bad.yaml: config error, yaml file contains list of type other than map: a (at descriptors[0])');
  });
  it('a float leaf', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1.5\n'))
      .toBe('bad.yaml: error checking config (at descriptors[0].rate_limit.requests_per_unit)');
  });
  it('share_threshold without a wildcard', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n'))
      .toContain("share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'");
  });
  it('YAML that does not parse, and duplicate mapping keys', () => {
    expect(refusal('domain: d\ndescriptors: [\n')).toMatch(/^bad\.yaml: error loading config file: /);
    expect(refusal('domain: d\ndomain: e\n')).toMatch(/^bad\.yaml: error loading config file: /);
  });
  it('extension: an unknown algorithm, burst where it does not apply, a zero rate', () => {
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, algorithm: magic }\n'))
      .toContain("invalid algorithm 'magic'");
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding_window, burst: 3 }\n'))
      .toContain("burst does not apply to algorithm 'sliding_window' (only token_bucket, leaky_bucket, gcra) (at descriptors[0].rate_limit.burst)");
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 0, algorithm: gcra }\n'))
      .toContain("algorithm 'gcra' needs requests_per_unit of at least 1");
    // RL.*'s bounds: limit x period below 2^52, a sliding log at most 10^6.
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: year, requests_per_unit: 4000000000, algorithm: sliding_window }\n'))
      .toContain('requests_per_unit x the unit in ms must be at most 4503599627370496 (at descriptors[0].rate_limit.requests_per_unit)');
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1000001, algorithm: sliding_log }\n'))
      .toContain('requests_per_unit of a sliding_log must be at most 1000000');
    expect(refusal('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: year, requests_per_unit: 1, algorithm: token_bucket, burst: 4000000000 }\n'))
      .toContain('burst x the unit in ms must be at most');
    // A fixed window has no such bound: any uint32, as envoyproxy/ratelimit.
    expect(load('domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: year, requests_per_unit: 4294967295 }\n').getLimit('d', E(['k', '']), null)!.limit.requestsPerUnit).toBe(4294967295);
  });
});
