/**
 * The resources of an xDS response → the configuration (src/rls/xds/resources.ts, validation.ts):
 * a RateLimitConfig (encoded by protobufjs from the published rls_conf.proto, xds-server.ts) makes
 * exactly the configuration the equivalent YAML file makes through the file loader; the node
 * metadata is parsed as envoyproxy/ratelimit parses CONFIG_GRPC_XDS_NODE_METADATA.
 */
import { describe, expect, it } from 'vitest';
import { loadRlsConfig } from '../../src/rls/config.js';
import { parseNodeMetadata } from '../../src/rls/xds/client.js';
import { validateResources } from '../../src/rls/xds/validation.js';
import { resource } from './xds-server.js';

const YAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unlimited: true }
  - key: path
    value: /static/*
    rate_limit: { unit: second, requests_per_unit: 500, name: static }
  - key: api_key
    descriptors:
      - key: method
        rate_limit: { unit: hour, requests_per_unit: 1000, name: api_any }
      - key: method
        value: POST
        detailed_metric: true
        rate_limit: { unit: hour, requests_per_unit: 100, name: api_post, replaces: [{ name: api_any }] }
  - key: tenant
    shadow_mode: true
    quota_mode: true
    rate_limit: { unit: day, requests_per_unit: 1000000 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10 }
`;

const cellgate = (fields: Record<string, unknown>): Record<string, unknown> => ({ fields: { cellgate: { structValue: { fields } } } });
const MESSAGE = {
  name: 'edge.yaml',
  domain: 'edge',
  descriptors: [
    { key: 'remote_address', rate_limit: { unit: 'MINUTE', requests_per_unit: 100 } },
    { key: 'remote_address', value: '10.0.0.1', rate_limit: { unlimited: true } },
    { key: 'path', value: '/static/*', rate_limit: { unit: 'SECOND', requests_per_unit: 500, name: 'static' } },
    {
      key: 'api_key',
      descriptors: [
        { key: 'method', rate_limit: { unit: 'HOUR', requests_per_unit: 1000, name: 'api_any' } },
        { key: 'method', value: 'POST', detailed_metric: true, rate_limit: { unit: 'HOUR', requests_per_unit: 100, name: 'api_post', replaces: [{ name: 'api_any' }] } },
      ],
    },
    { key: 'tenant', shadow_mode: true, quota_mode: true, rate_limit: { unit: 'DAY', requests_per_unit: 1000000 } },
    {
      key: 'user', rate_limit: { unit: 'MINUTE', requests_per_unit: 60 },
      metadata: cellgate({ algorithm: { stringValue: 'token_bucket' }, burst: { numberValue: 10 } }),
    },
  ],
};

describe('xDS resources', () => {
  it('a RateLimitConfig makes the configuration its YAML file makes', async () => {
    const fromFile = loadRlsConfig([{ name: 'edge.yaml', text: YAML }]);
    const fromXds = await validateResources([resource(MESSAGE)]);
    expect(fromXds.domains).toEqual(fromFile.domains);
    expect(fromXds.files).toEqual(['edge.yaml']);
    const post = fromXds.getLimit('edge', [{ key: 'api_key', value: 'k1' }, { key: 'method', value: 'POST' }], null);
    expect(post?.limit).toMatchObject({ requestsPerUnit: 100, unit: 'HOUR', replaces: ['api_any'], detailedMetric: true });
    expect(fromXds.getLimit('edge', [{ key: 'user', value: 'u' }], null)?.limit).toMatchObject({ algorithm: 'token_bucket', burst: 10 });
  });

  it('refusals name the resource and the place, as the file loader names the file', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ name: 'r', domain: '' }, 'r: config file cannot have empty domain (at domain)'],
      [{ name: 'r', domain: 'd', descriptors: [{ key: '' }] }, 'r: descriptor has empty key (at descriptors[0].key)'],
      [{ name: 'r', domain: 'd', descriptors: [{ key: 'a' }, { key: 'a' }] }, "r: duplicate descriptor composite key 'd.a' (at descriptors[1])"],
      [{ name: 'r', domain: 'd', descriptors: [{ key: 'a', rate_limit: { unlimited: true, unit: 'SECOND' } }] }, 'r: should not specify rate limit unit when unlimited (at descriptors[0].rate_limit.unit)'],
      [{ name: 'r', domain: 'd', descriptors: [{ key: 'a', rate_limit: { unit: 'SECOND', name: 'x', replaces: [{ name: 'x' }] } }] }, 'r: replaces should not contain name of same descriptor (at descriptors[0].rate_limit.replaces[0])'],
      [{ name: 'r', domain: 'd', descriptors: [{ key: 'a', metadata: cellgate({ algorithm: { stringValue: 'gcra' } }) }] }, 'r: metadata.cellgate given without a rate_limit (at descriptors[0].metadata.cellgate)'],
      [{ name: 'r', domain: 'd', descriptors: [{ key: 'a', rate_limit: { unit: 'SECOND', requests_per_unit: 1 }, metadata: { fields: { cellgate: { stringValue: 'x' } } } }] }, 'r: metadata.cellgate must be a struct of rate_limit keys (at descriptors[0].metadata.cellgate)'],
      [{ name: '', domain: 'd', descriptors: [{ key: 'a', rate_limit: { unit: 'SECOND', requests_per_unit: 1 }, metadata: cellgate({ algorithm: { stringValue: 'nope' } }) }] }, "resources[0]: invalid algorithm 'nope'"],
    ];
    for (const [message, reason] of cases) await expect(validateResources([resource(message)])).rejects.toThrow(reason);
  });

  it("node metadata: comma-separated pairs split at the first '=', values strings, pairs without '=' dropped", () => {
    expect(parseNodeMetadata('')).toEqual({});
    expect(parseNodeMetadata('a=1,b=x=y,c,d:e,=empty-key,f=')).toEqual({ a: '1', b: 'x=y', '': 'empty-key', f: '' });
  });
});
