/**
 * The configuration's doors (src/rls/config.ts, config-dir.ts), in process: a domain given as a plain
 * value passes exactly the checks its YAML text passes; the directory reader's bounds (1,000 files
 * read, the 1,001st refuses the set; 10,000 entries), its file rules (only `*.yaml`, dot files by
 * rule, Kubernetes' `..` entries never named); and `/rlconfig`'s dump, as envoyproxy/ratelimit prints it.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseRlsDomain, rlsConfigOf, rlsDomainFromValue, RlsConfigError } from '../../src/rls/config.js';
import { readRlsConfigDir, RlsConfigLoadError, RLS_CONFIG_MAX_ENTRIES, RLS_CONFIG_MAX_FILES } from '../../src/rls/config-dir.js';

const root = mkdtempSync(join(tmpdir(), 'cellgate-rls-sources-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let serial = 0;
function fresh(): string {
  const d = join(root, `case${++serial}`);
  mkdirSync(d);
  return d;
}

const limitOf = (domain: string, n: number) => `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: ${n} }\n`;

async function refusedWith(dir: string, rules = { ignoreDotfiles: false }): Promise<RlsConfigLoadError> {
  try {
    await readRlsConfigDir(dir, rules);
  } catch (e) {
    expect(e).toBeInstanceOf(RlsConfigLoadError);
    return e as RlsConfigLoadError;
  }
  throw new Error('read, expected a refusal');
}

describe('a domain as a plain value', () => {
  const yaml = `domain: edge
descriptors:
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unlimited: true }
  - key: path
    value: /static/*
    share_threshold: true
    rate_limit: { unit: second, requests_per_unit: 500 }
  - key: api_key
    descriptors:
      - key: method
        value: POST
        shadow_mode: true
        rate_limit: { unit: hour, requests_per_unit: 100, name: api_post }
`;
  const value = {
    domain: 'edge',
    descriptors: [
      { key: 'remote_address', value: '10.0.0.1', rate_limit: { unlimited: true } },
      { key: 'path', value: '/static/*', share_threshold: true, rate_limit: { unit: 'SECOND', requests_per_unit: 500 } },
      { key: 'api_key', descriptors: [{ key: 'method', value: 'POST', shadow_mode: true, rate_limit: { unit: 'HOUR', requests_per_unit: 100, name: 'api_post' } }] },
    ],
  };

  it('validates into the same configuration as its YAML text', () => {
    const fromText = rlsConfigOf([parseRlsDomain('edge.yaml', yaml)]);
    const fromValue = rlsConfigOf([rlsDomainFromValue('edge', value)]);
    expect(fromValue.dump()).toBe(fromText.dump());
    for (const entries of [[{ key: 'path', value: '/static/a.css' }], [{ key: 'api_key', value: 'x' }, { key: 'method', value: 'POST' }]]) {
      expect(fromValue.getLimit('edge', entries, null)).toEqual(fromText.getLimit('edge', entries, null));
    }
  });

  it("is refused with a file's messages, naming its source", () => {
    const bad = (v: unknown): string => {
      try {
        rlsDomainFromValue('resource edge', v);
      } catch (e) {
        expect(e).toBeInstanceOf(RlsConfigError);
        return (e as Error).message;
      }
      throw new Error('accepted');
    };
    expect(bad({ domain: '' })).toBe('resource edge: config file cannot have empty domain (at domain)');
    expect(bad({ domain: 'x', descriptors: [{ key: 'k', rate_limit: { unit: 'fortnight', requests_per_unit: 1 } }] }))
      .toBe("resource edge: invalid rate limit unit 'fortnight' (at descriptors[0].rate_limit.unit)");
    expect(bad({ domain: 'x', descriptors: [{ key: 'k', requestsperunit: 1 }] })).toBe("resource edge: config error, unknown key 'requestsperunit' (at descriptors[0].requestsperunit)");
  });

  it('the same domain from two sources is refused', () => {
    expect(() => rlsConfigOf([rlsDomainFromValue('a', { domain: 'x' }), rlsDomainFromValue('b', { domain: 'x' })]))
      .toThrow("b: duplicate domain 'x' in config file (at domain)");
  });
});

describe("/rlconfig's dump", () => {
  it('prints each limit as envoyproxy/ratelimit does, unlimited with unit UNKNOWN', () => {
    const c = rlsConfigOf([parseRlsDomain('a.yaml', `domain: d
descriptors:
  - key: k1
    value: v1
    rate_limit: { unit: second, requests_per_unit: 5 }
    descriptors:
      - key: k2
        shadow_mode: true
        rate_limit: { unit: minute, requests_per_unit: 7 }
  - key: free
    rate_limit: { unlimited: true }
  - key: q
    quota_mode: true
    rate_limit: { unit: day, requests_per_unit: 100 }
  - key: nolimit
`)]);
    expect(c.dump()).toBe([
      'd.k1_v1: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false',
      'd.k1_v1.k2: unit=MINUTE requests_per_unit=7, shadow_mode: true, quota_mode: false',
      'd.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false',
      'd.q: unit=DAY requests_per_unit=100, shadow_mode: false, quota_mode: true',
      '',
    ].join('\n'));
  });
});

describe('the directory reader', () => {
  it(`reads ${RLS_CONFIG_MAX_FILES} files; one more refuses the set`, async () => {
    const d = fresh();
    for (let i = 0; i < RLS_CONFIG_MAX_FILES; i++) writeFileSync(join(d, `d${i}.yaml`), limitOf(`d${i}`, 1));
    expect((await readRlsConfigDir(d, { ignoreDotfiles: false })).domains).toHaveLength(RLS_CONFIG_MAX_FILES);
    writeFileSync(join(d, 'one-more.yaml'), limitOf('one-more', 1));
    const e = await refusedWith(d);
    expect(e.reason).toBe('too_many_files');
    expect(e.message).toBe(`${d}: more than ${RLS_CONFIG_MAX_FILES} *.yaml files in the configuration directory`);
  });

  it(`a directory of more than ${RLS_CONFIG_MAX_ENTRIES} entries of any name is refused without looking further`, async () => {
    const d = fresh();
    for (let i = 0; i <= RLS_CONFIG_MAX_ENTRIES; i++) writeFileSync(join(d, `n${i}.txt`), '');
    const e = await refusedWith(d);
    expect(e.reason).toBe('too_many_files');
    expect(e.message).toContain(`more than ${RLS_CONFIG_MAX_ENTRIES} entries`);
  });

  it('reads only *.yaml; names the others, never Kubernetes\' `..` entries; dot files by rule', async () => {
    const d = fresh();
    writeFileSync(join(d, 'a.yaml'), limitOf('a', 1));
    writeFileSync(join(d, '.hidden.yaml'), limitOf('hidden', 1));
    writeFileSync(join(d, 'b.yml'), limitOf('b', 1));
    writeFileSync(join(d, 'README.md'), 'not a configuration');
    mkdirSync(join(d, '..2026_01_01_00_00_00.1'));
    mkdirSync(join(d, 'sub'));
    const all = await readRlsConfigDir(d, { ignoreDotfiles: false });
    expect(all.domains.map((x) => x.domain)).toEqual(['hidden', 'a']);
    expect(all.ignored).toEqual(['README.md', 'b.yml', 'sub']);
    const noDots = await readRlsConfigDir(d, { ignoreDotfiles: true });
    expect(noDots.domains.map((x) => x.domain)).toEqual(['a']);
  });

  it('a directory named x.yaml is refused as not a regular file; a missing directory as unreadable', async () => {
    const d = fresh();
    mkdirSync(join(d, 'x.yaml'));
    expect((await refusedWith(d)).reason).toBe('not_regular');
    const missing = await refusedWith(join(d, 'nope'));
    expect(missing.reason).toBe('unreadable');
    expect(missing.message).toContain('ENOENT');
  });
});
