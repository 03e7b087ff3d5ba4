/** The Envoy recipe's rate limit files load with cellgate's loader, and mean what the recipe says. */
import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadRlsConfigDir } from '../../src/rls/config.js';
import { parse } from 'yaml';

const DIR = new URL('../../examples/envoy/rls-config/', import.meta.url).pathname;

describe('examples/envoy', () => {
  it('rls-config loads: per client address 100 a minute, per /api/ path a token bucket', () => {
    const c = loadRlsConfigDir(DIR);
    expect(c.getLimit('edge', [{ key: 'remote_address', value: '10.0.0.1' }], null)!.limit).toMatchObject({ requestsPerUnit: 100, unit: 'MINUTE' });
    expect(c.getLimit('edge', [{ key: 'header_match', value: 'api' }, { key: 'path', value: '/api/x' }], null)!.limit)
      .toMatchObject({ requestsPerUnit: 20, unit: 'SECOND', algorithm: 'token_bucket', burst: 40 });
  });
  it('envoy.yaml is YAML whose rate limit filter names the domain of rls-config and the cellgate cluster', () => {
    const text = readFileSync(new URL('../../examples/envoy/envoy.yaml', import.meta.url), 'utf8');
    const doc = parse(text);
    expect(text).toContain('envoy.filters.http.ratelimit');
    expect(text).toContain('domain: edge');
    expect(doc.static_resources.clusters.map((c: { name: string }) => c.name)).toContain('cellgate_rls');
    expect(readdirSync(DIR)).toEqual(['edge.yaml']);
  });
});
