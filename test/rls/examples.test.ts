/**
 * The Envoy recipe: its rate limit files load with cellgate's loader and mean what the recipe says;
 * its bootstrap, read as Envoy's documented rules read it (there is no Envoy binary in the suite),
 * sends each request's descriptors to the limits the README names and the path it names upstream.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { readRlsConfigDir } from '../../src/rls/config-dir.js';
import { rlsConfigOf, type RlsConfig } from '../../src/rls/config.js';
import { parse } from 'yaml';

const DIR = new URL('../../examples/envoy/rls-config/', import.meta.url).pathname;

describe('examples/envoy', () => {
  it('rls-config loads: per client address 100 a minute, per /api/ path a token bucket', async () => {
    const c = rlsConfigOf((await readRlsConfigDir(DIR, { ignoreDotfiles: false })).domains);
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

  describe('envoy.yaml, read as Envoy reads it', () => {
    type Action = { remote_address?: object; header_value_match?: { descriptor_key?: string; descriptor_value: string; headers: { name: string; string_match: { prefix: string } }[] }; request_headers?: { header_name: string; descriptor_key: string } };
    type Route = { match: { prefix: string }; route: { cluster: string; rate_limits?: unknown; prefix_rewrite?: string; regex_rewrite?: { pattern: { regex: string }; substitution: string } } };
    const doc = parse(readFileSync(new URL('../../examples/envoy/envoy.yaml', import.meta.url), 'utf8'));
    const vh = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0] as { rate_limits: { actions: Action[] }[]; routes: Route[] };
    let config: RlsConfig;
    beforeAll(async () => {
      config = rlsConfigOf((await readRlsConfigDir(DIR, { ignoreDotfiles: false })).domains);
    });

    /** The route Envoy picks for `path` (the first whose prefix matches). */
    const routeOf = (path: string) => vh.routes.find((r) => path.startsWith(r.match.prefix))!;

    /**
     * The descriptors a request sends: the route's rate_limits when it has any (then the virtual
     * host's are not applied), else the virtual host's; an entry whose action produces nothing (a
     * header_value_match that does not match) sends no descriptor.
     */
    function descriptors(path: string, client: string): { key: string; value: string }[][] {
      const route = routeOf(path);
      const entries = (route.route.rate_limits as { actions: Action[] }[] | undefined) ?? vh.rate_limits;
      const out: { key: string; value: string }[][] = [];
      for (const { actions } of entries) {
        const d: { key: string; value: string }[] = [];
        let sent = true;
        for (const a of actions) {
          if (a.remote_address) d.push({ key: 'remote_address', value: client });
          else if (a.header_value_match) {
            const m = a.header_value_match;
            if (!m.headers.every((h) => h.name === ':path' && path.startsWith(h.string_match.prefix))) { sent = false; break; }
            d.push({ key: m.descriptor_key ?? 'header_match', value: m.descriptor_value });
          } else if (a.request_headers) {
            expect(a.request_headers.header_name).toBe(':path');
            d.push({ key: a.request_headers.descriptor_key, value: path });
          } else throw new Error(`an action this reading does not know: ${JSON.stringify(a)}`);
        }
        if (sent) out.push(d);
      }
      return out;
    }

    /** The path the upstream receives (Envoy's regex_rewrite replaces each match of the pattern). */
    function upstreamPath(path: string): string {
      const r = routeOf(path).route;
      if (r.regex_rewrite) return path.replace(new RegExp(r.regex_rewrite.pattern.regex, 'g'), r.regex_rewrite.substitution);
      if (r.prefix_rewrite !== undefined) return r.prefix_rewrite + path.slice(routeOf(path).match.prefix.length);
      return path;
    }

    it('/api/x is limited per client address and per path; / per client address only', () => {
      const api = descriptors('/api/x', '10.0.0.1').map((d) => config.getLimit('edge', d, null)!.limit);
      expect(api).toEqual([
        expect.objectContaining({ requestsPerUnit: 100, unit: 'MINUTE' }),
        expect.objectContaining({ requestsPerUnit: 20, unit: 'SECOND', algorithm: 'token_bucket' }),
      ]);
      const root = descriptors('/', '10.0.0.1');
      expect(root).toEqual([[{ key: 'remote_address', value: '10.0.0.1' }]]);
      expect(config.getLimit('edge', root[0], null)!.limit).toMatchObject({ requestsPerUnit: 100, unit: 'MINUTE' });
    });

    it('every path reaches the stand-in upstream as /healthz (not /healthzx)', () => {
      for (const path of ['/', '/api/x', '/api/', '/other/page']) expect(upstreamPath(path), path).toBe('/healthz');
    });
  });
});
