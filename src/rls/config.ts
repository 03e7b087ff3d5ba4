/**
 * The rate limit service's configuration: envoyproxy/ratelimit's YAML format, unchanged
 * (docs/envoy.md). Every `*.yaml` file of the `rls-config` directory holds one `domain` and its
 * tree of `descriptors`; a request's descriptor is matched against that tree level by level, the
 * most specific node winning (`key_value`, then a wildcard value, then the bare `key`).
 *
 * Loading refuses what envoyproxy/ratelimit refuses, with its error texts, each prefixed by the
 * file's name and followed by where in the file the fault is (`descriptors[0].rate_limit`).
 *
 * One door for every source: a domain's document (a file's text, or the same tree as a plain value,
 * as a configuration pushed over the network decodes to) is validated into an RlsDomain
 * (parseRlsDomain, rlsDomainFromValue), and the domains of one source make the configuration value
 * the service uses (rlsConfigOf). Where the documents came from (config-dir.ts reads the directory)
 * is not this file's concern.
 * cellgate adds `algorithm`, `burst` and `allow_debt` to `rate_limit` (an extension: without them a
 * file counts exactly as it does there, in fixed windows). `allow_debt: true` marks a limit for
 * charges after the fact (a gateway's token count sent with the response): its hits are recorded even
 * beyond the limit, as debt, and the calls after wait until it is repaid.
 */
import { Document, isMap, isScalar, isSeq, parseDocument, type Node as YamlNode } from 'yaml';
import { ParamsProblem, type Algorithm } from '../limiters/algorithm.js';
import { newGcraMsParams } from '../limiters/gcra-ms.js';
import { MAX_SCALED } from '../limiters/rate-decision.js';
import { ALGORITHMS as REGISTRY } from '../limiters/registry.js';

/** A rate limit unit as Envoy's API names it, with its window in seconds (envoyproxy/ratelimit's UnitToDivider). */
export const UNIT_SECONDS: Readonly<Record<string, number>> = {
  SECOND: 1,
  MINUTE: 60,
  HOUR: 3600,
  DAY: 86400,
  WEEK: 7 * 86400,
  MONTH: 30 * 86400,
  YEAR: 365 * 86400,
};

/**
 * cellgate's extension: how a limit counts, in the configuration's words (docs/envoy.md).
 * `fixed_window` (the default) counts as envoyproxy/ratelimit does; the other names are the RL.*
 * algorithms' (their registry entries' configName), whose bounds and BURST rule apply (rlsAlgorithm).
 */
const ENVOY_FIXED_WINDOW = 'fixed_window';
export const ALGORITHMS: readonly string[] = [ENVOY_FIXED_WINDOW, ...REGISTRY.filter((a) => a.configName !== ENVOY_FIXED_WINDOW).map((a) => a.configName)];
export type RlsAlgorithm = string;

/** The RL.* algorithm a configuration name stands for (the registry's entry). */
export function rlsAlgorithm(name: RlsAlgorithm): Algorithm {
  const algo = REGISTRY.find((a) => a.configName === name);
  if (algo === undefined) throw new Error(`no RL.* algorithm for '${name}'`);
  return algo;
}
const BURST_ALGORITHMS: readonly RlsAlgorithm[] = ALGORITHMS.filter((name) => rlsAlgorithm(name).acceptsBurst);
const MAX_UINT32 = 4294967295;

/** One configured (or per-request override) limit. */
export interface RlsLimit {
  requestsPerUnit: number;
  /** The unit's name (SECOND...), as the response's current_limit carries it; '' for unlimited. */
  unit: string;
  unitSeconds: number;
  unlimited: boolean;
  name: string;
  replaces: string[];
  shadowMode: boolean;
  quotaMode: boolean;
  detailedMetric: boolean;
  algorithm: RlsAlgorithm;
  burst: number;
  /**
   * `allow_debt`: hits are charged even beyond the limit (RL.* `COST n FORCE`), as debt the next
   * calls wait out. A fixed window always counts every hit (as envoyproxy/ratelimit), marked or not.
   */
  allowDebt: boolean;
  /** The stats key: domain.key_value.subkey... (envoyproxy/ratelimit's FullKey). */
  fullKey: string;
}

interface DescriptorNode {
  children: Map<string, DescriptorNode>;
  /** Wildcard children (`key_val*`), in file order, split on `*` once at load. */
  wildcards: { key: string; parts: string[] }[];
  limit: RlsLimit | null;
  valueToMetric: boolean;
  shareThreshold: boolean;
  wildcardPattern: string;
}

/** What a request descriptor matched: the limit, the stats key, and per entry the share_threshold pattern ('' = own value). */
export interface MatchedLimit {
  limit: RlsLimit;
  statsKey: string;
  sharePatterns: string[] | null;
}

export interface RequestEntry {
  key: string;
  value: string;
}

export class RlsConfigError extends Error {}

/** The keys any map of a file may use (envoyproxy/ratelimit's validKeys, plus cellgate's algorithm and burst). */
const VALID_KEYS = new Set([
  'domain', 'key', 'value', 'descriptors', 'rate_limit', 'unit', 'requests_per_unit', 'unlimited', 'shadow_mode',
  'quota_mode', 'name', 'replaces', 'detailed_metric', 'value_to_metric', 'share_threshold', 'metadata',
  'algorithm', 'burst', 'allow_debt',
]);

function newNode(): DescriptorNode {
  return { children: new Map(), wildcards: [], limit: null, valueToMetric: false, shareThreshold: false, wildcardPattern: '' };
}

/** envoyproxy/ratelimit's wildcardMatch: each `*` matches any run of characters (none included). */
function wildcardMatch(parts: string[], value: string): boolean {
  if (parts.length === 1) return parts[0] === value;
  const first = parts[0];
  const last = parts[parts.length - 1];
  if (!value.startsWith(first) || !value.endsWith(last)) return false;
  let fixed = 0;
  for (const p of parts) fixed += p.length;
  if (value.length < fixed) return false;
  let at = first.length;
  const end = value.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const idx = value.indexOf(parts[i], at);
    if (idx < 0 || idx + parts[i].length > end) return false;
    at = idx + parts[i].length;
  }
  return true;
}

export class RlsConfig {
  readonly domains = new Map<string, DescriptorNode>();
  /** The files it was loaded from, for logs. */
  files: string[] = [];

  /**
   * The limit of one request descriptor in `domain` (envoyproxy/ratelimit's GetLimit), or null when
   * nothing applies. `override` (the descriptor's own `limit`) wins over the configuration.
   */
  getLimit(domain: string, entries: RequestEntry[], override: { requestsPerUnit: number; unit: string } | null): MatchedLimit | null {
    const root = this.domains.get(domain);
    if (root === undefined) return null;
    if (override !== null) {
      const key = descriptorKey(domain, entries);
      const unitSeconds = UNIT_SECONDS[override.unit];
      if (unitSeconds === undefined) return null;
      return {
        limit: {
          requestsPerUnit: override.requestsPerUnit, unit: override.unit, unitSeconds, unlimited: false, name: '', replaces: [],
          shadowMode: false, quotaMode: false, detailedMetric: false, algorithm: 'fixed_window', burst: 0, allowDebt: false, fullKey: key,
        },
        statsKey: key,
        sharePatterns: null,
      };
    }
    let map = root.children;
    let prev = root;
    let found: RlsLimit | null = null;
    let sharePatterns: string[] | null = null;
    let detailedKey = domain;
    let valueKey = domain;
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i];
      let finalKey = `${entry.key}_${entry.value}`;
      detailedKey += '.' + finalKey;
      let next = map.get(finalKey);
      let wildcardKey = '';
      if (next === undefined) {
        for (const w of prev.wildcards) {
          if (wildcardMatch(w.parts, finalKey)) {
            next = map.get(w.key);
            wildcardKey = w.key;
            break;
          }
        }
      }
      const matchedUsingValue = next !== undefined;
      if (next === undefined) {
        finalKey = entry.key;
        next = map.get(finalKey);
      }
      let sharePattern = '';
      if (wildcardKey !== '' && next !== undefined && next.shareThreshold && next.wildcardPattern !== '') {
        sharePattern = next.wildcardPattern.startsWith(entry.key + '_') ? next.wildcardPattern.slice(entry.key.length + 1) : next.wildcardPattern;
        sharePatterns ??= new Array<string>(entries.length).fill('');
        sharePatterns[i] = sharePattern;
      }
      valueKey += '.';
      if (next !== undefined) {
        let valueToUse = '';
        if (wildcardKey !== '') {
          if (sharePattern !== '') valueToUse = sharePattern;
          else if (next.valueToMetric) valueToUse = entry.value;
          else valueToUse = wildcardKey.startsWith(entry.key + '_') ? wildcardKey.slice(entry.key.length + 1) : wildcardKey;
        } else if (matchedUsingValue) valueToUse = entry.value;
        else if (next.valueToMetric) valueToUse = entry.value;
        valueKey += valueToUse !== '' ? `${entry.key}_${valueToUse}` : entry.key;
      } else valueKey += entry.key;
      // A limit applies only when the request's descriptor ends at its node: a longer descriptor
      // ending below it is not limited by it.
      if (next !== undefined && next.limit !== null && i === entries.length - 1) found = next.limit;
      if (next !== undefined && next.children.size > 0) {
        map = next.children;
        prev = next;
      } else break;
    }
    if (found === null) return null;
    let statsKey = found.fullKey;
    if (found.detailedMetric) {
      if (sharePatterns !== null) {
        statsKey = domain;
        for (let i = 0; i < entries.length; i++) {
          const e = entries[i];
          statsKey += '.' + (sharePatterns[i] !== '' ? `${e.key}_${sharePatterns[i]}` : e.value !== '' ? `${e.key}_${e.value}` : e.key);
        }
      } else statsKey = detailedKey;
    } else if (valueKey !== found.fullKey) statsKey = valueKey;
    return { limit: found, statsKey, sharePatterns };
  }

  /**
   * Every configured limit, one line each, as envoyproxy/ratelimit's Dump prints it for its
   * `/rlconfig` (an unlimited one has the unit UNKNOWN), in file order (Go's is a map's).
   */
  dump(): string {
    let out = '';
    const walk = (node: DescriptorNode): void => {
      const l = node.limit;
      if (l !== null) {
        out += `${l.fullKey}: unit=${l.unit === '' ? 'UNKNOWN' : l.unit} requests_per_unit=${l.requestsPerUnit}, shadow_mode: ${l.shadowMode}, quota_mode: ${l.quotaMode}\n`;
      }
      for (const child of node.children.values()) walk(child);
    };
    for (const root of this.domains.values()) walk(root);
    return out;
  }
}

/** envoyproxy/ratelimit's descriptorKey: the stats key of a per-request override. */
function descriptorKey(domain: string, entries: RequestEntry[]): string {
  let key = '';
  for (const e of entries) {
    if (key !== '') key += '.';
    key += e.key;
    if (e.value !== '') key += '_' + e.value;
  }
  return `${domain}.${key}`;
}

/** One domain, validated: what one file (or one pushed resource) holds. */
export interface RlsDomain {
  domain: string;
  /** The file (or resource) it came from, for messages and logs. */
  source: string;
  root: DescriptorNode;
}

/**
 * One domain's YAML document (a file's text) → that domain, validated as envoyproxy/ratelimit
 * validates a file; throws RlsConfigError naming `source` and the place in it.
 */
export function parseRlsDomain(source: string, text: string): RlsDomain {
  const loader = new FileLoader(source);
  // YAML 1.1, as envoyproxy/ratelimit's parser (yaml.v2): yes/no/on/off are booleans.
  const doc = parseDocument(text, { version: '1.1', uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length > 0) loader.fail(`error loading config file: ${doc.errors[0].message.split('\n')[0]}`, '');
  return loader.load(doc.contents);
}

/**
 * The same from a plain value (`{ domain, descriptors: [...] }`, the tree a YAML file decodes to):
 * for a configuration that arrives already decoded, so that it passes exactly the checks a file
 * passes. Throws RlsConfigError naming `source`.
 */
export function rlsDomainFromValue(source: string, value: unknown): RlsDomain {
  return new FileLoader(source).load(new Document(value, { version: '1.1' }).contents);
}

/**
 * The configuration the service uses, from the domains of one source (a directory, or one
 * subscription): a domain given twice is refused, as envoyproxy/ratelimit refuses it.
 */
export function rlsConfigOf(domains: readonly RlsDomain[]): RlsConfig {
  const config = new RlsConfig();
  for (const d of domains) {
    if (config.domains.has(d.domain)) throw new RlsConfigError(`${d.source}: duplicate domain '${d.domain}' in config file (at domain)`);
    config.domains.set(d.domain, d.root);
  }
  config.files = domains.map((d) => d.source);
  return config;
}

/** Builds a configuration from files' texts (`name` is what errors name); throws RlsConfigError. */
export function loadRlsConfig(files: { name: string; text: string }[]): RlsConfig {
  return rlsConfigOf(files.map((f) => parseRlsDomain(f.name, f.text)));
}

/** A YAML mapping's entries as [key, value node]; keys that are not strings are refused by validateKeys first. */
type Fields = Map<string, unknown>;

class FileLoader {
  constructor(private readonly file: string) {}

  fail(text: string, at: string): never {
    throw new RlsConfigError(at === '' ? `${this.file}: ${text}` : `${this.file}: ${text} (at ${at})`);
  }

  load(contents: unknown): RlsDomain {
    if (contents === null || (isScalar(contents) && (contents.value === null || contents.value === ''))) {
      this.fail('config file cannot have empty domain', '');
    }
    if (!isMap(contents)) this.fail('error loading config file: the document is not a mapping', '');
    const root = this.fields(contents, '');
    const domain = this.string(root, 'domain', '');
    if (domain === '') this.fail('config file cannot have empty domain', 'domain');
    const node = newNode();
    this.loadDescriptors(node, `${domain}.`, root.get('descriptors'), 'descriptors');
    return { domain, source: this.file, root: node };
  }

  /**
   * A mapping's fields, after envoyproxy/ratelimit's validateYamlKeys: every key a string and a
   * known name (anywhere in the file), every list a list of mappings, every leaf a string, integer,
   * boolean or null; `metadata` is not looked into.
   */
  private fields(map: unknown, at: string): Fields {
    const out: Fields = new Map();
    if (!isMap(map)) this.fail('config error, yaml file contains list of type other than map', at);
    for (const pair of map.items) {
      const k = pair.key;
      if (!isScalar(k) || typeof k.value !== 'string') {
        this.fail(`config error, key is not of type string: ${isScalar(k) ? String(k.value) : String(k)}`, at);
      }
      const name = k.value as string;
      const here = at === '' ? name : `${at}.${name}`;
      if (!VALID_KEYS.has(name)) this.fail(`config error, unknown key '${name}'`, here);
      const v = pair.value as YamlNode | null;
      if (name !== 'metadata') {
        if (isSeq(v)) {
          v.items.forEach((item, i) => {
            if (!isMap(item)) this.fail(`config error, yaml file contains list of type other than map: ${String(isScalar(item) ? item.value : item)}`, `${here}[${i}]`);
          });
        } else if (isMap(v)) this.fields(v, here);
        else if (v !== null && isScalar(v)) {
          const t = typeof v.value;
          // A date (YAML 1.1 timestamp) is text to yaml.v2 as well.
          const ok = v.value === null || t === 'string' || t === 'boolean' || (t === 'number' && Number.isInteger(v.value)) || v.value instanceof Date;
          if (!ok) this.fail('error checking config', here);
        } else if (v !== null) this.fail('error checking config', here);
      }
      out.set(name, v);
    }
    return out;
  }

  /**
   * A string field: absent or null is ''; a number or boolean is its text, as yaml.v2 decodes any
   * scalar into a string field.
   */
  private string(f: Fields, name: string, at: string): string {
    const v = f.get(name);
    if (v === undefined || v === null) return '';
    if (!isScalar(v)) this.fail(`error loading config file: '${name}' must be a string`, at === '' ? name : `${at}.${name}`);
    if (v.value === null) return '';
    return typeof v.source === 'string' ? v.source : String(v.value);
  }

  private bool(f: Fields, name: string, at: string): boolean {
    const v = f.get(name);
    if (v === undefined || v === null || (isScalar(v) && v.value === null)) return false;
    if (!isScalar(v) || typeof v.value !== 'boolean') this.fail(`error loading config file: '${name}' must be true or false`, `${at}.${name}`);
    return v.value as boolean;
  }

  /** An unsigned integer field (requests_per_unit: uint32 there). */
  private uint(f: Fields, name: string, at: string, max: number): number {
    const v = f.get(name);
    if (v === undefined || v === null || (isScalar(v) && v.value === null)) return 0;
    if (!isScalar(v) || typeof v.value !== 'number' || !Number.isInteger(v.value) || v.value < 0 || v.value > max) {
      this.fail(`error loading config file: '${name}' must be an integer between 0 and ${max}`, `${at}.${name}`);
    }
    return v.value as number;
  }

  private loadDescriptors(parent: DescriptorNode, parentKey: string, list: unknown, at: string): void {
    if (list === undefined || list === null || (isScalar(list) && list.value === null)) return;
    if (!isSeq(list)) this.fail('error loading config file: \'descriptors\' must be a list', at);
    list.items.forEach((item, i) => {
      const here = `${at}[${i}]`;
      const d = this.fields(item, here);
      const key = this.string(d, 'key', here);
      if (key === '') this.fail('descriptor has empty key', `${here}.key`);
      const value = this.string(d, 'value', here);
      const finalKey = value !== '' ? `${key}_${value}` : key;
      const newParentKey = parentKey + finalKey;
      if (parent.children.has(finalKey)) this.fail(`duplicate descriptor composite key '${newParentKey}'`, here);
      const shadowMode = this.bool(d, 'shadow_mode', here);
      const quotaMode = this.bool(d, 'quota_mode', here);
      const detailedMetric = this.bool(d, 'detailed_metric', here);
      const valueToMetric = this.bool(d, 'value_to_metric', here);
      const shareThreshold = this.bool(d, 'share_threshold', here);
      let limit: RlsLimit | null = null;
      const rl = d.get('rate_limit');
      if (rl !== undefined && rl !== null && !(isScalar(rl) && rl.value === null)) {
        limit = this.loadRateLimit(this.fields(rl, `${here}.rate_limit`), `${here}.rate_limit`, newParentKey, shadowMode, quotaMode, detailedMetric);
      }
      if (shareThreshold && !finalKey.includes('*')) {
        this.fail(`share_threshold can only be used with wildcard values (containing '*'), but found key '${finalKey}'`, `${here}.share_threshold`);
      }
      if (finalKey.includes('*')) parent.wildcards.push({ key: finalKey, parts: finalKey.split('*') });
      const node = newNode();
      node.limit = limit;
      node.valueToMetric = valueToMetric;
      node.shareThreshold = shareThreshold;
      node.wildcardPattern = shareThreshold ? finalKey : '';
      this.loadDescriptors(node, `${newParentKey}.`, d.get('descriptors'), `${here}.descriptors`);
      parent.children.set(finalKey, node);
    });
  }

  /** The bounds RL.* puts on the same parameters (the registry's entry): integer arithmetic below 2^52. */
  private checkAlgorithm(algorithm: RlsAlgorithm, limit: number, burst: number, periodMs: number, at: string): void {
    if (limit === 0) this.fail(`algorithm '${algorithm}' needs requests_per_unit of at least 1`, `${at}.requests_per_unit`);
    const algo = rlsAlgorithm(algorithm);
    if (limit > algo.maxLimit) this.fail(`requests_per_unit of a ${algorithm} must be at most ${algo.maxLimit}`, `${at}.requests_per_unit`);
    switch (algo.checkParams(limit, periodMs, burst, newGcraMsParams())) {
      case ParamsProblem.BurstProduct:
        this.fail(`burst x the unit in ms must be at most ${MAX_SCALED} (burst defaults to requests_per_unit)`, at);
        break;
      case ParamsProblem.LimitProduct:
        this.fail(`requests_per_unit x the unit in ms must be at most ${MAX_SCALED}`, `${at}.requests_per_unit`);
        break;
      case ParamsProblem.ZeroInterval:
        this.fail('more than 10^9 per second (the emission interval would be 0 ns)', `${at}.requests_per_unit`);
        break;
      case ParamsProblem.ToleranceOverflow:
        this.fail('the burst tolerance (the unit / requests_per_unit x burst) exceeds 100 years', `${at}.burst`);
        break;
      default:
    }
  }

  private loadRateLimit(r: Fields, at: string, fullKey: string, shadowMode: boolean, quotaMode: boolean, detailedMetric: boolean): RlsLimit {
    const unlimited = this.bool(r, 'unlimited', at);
    const unitText = this.string(r, 'unit', at);
    const unit = unitText.toUpperCase();
    const unitSeconds = UNIT_SECONDS[unit];
    if (unlimited) {
      if (unitSeconds !== undefined) this.fail('should not specify rate limit unit when unlimited', `${at}.unit`);
    } else if (unitSeconds === undefined) this.fail(`invalid rate limit unit '${unitText}'`, `${at}.unit`);
    const requestsPerUnit = this.uint(r, 'requests_per_unit', at, MAX_UINT32);
    const name = this.string(r, 'name', at);
    const replaces: string[] = [];
    const rep = r.get('replaces');
    if (rep !== undefined && rep !== null && !(isScalar(rep) && rep.value === null)) {
      if (!isSeq(rep)) this.fail('error loading config file: \'replaces\' must be a list', `${at}.replaces`);
      rep.items.forEach((item, i) => {
        const e = this.fields(item, `${at}.replaces[${i}]`);
        const n = this.string(e, 'name', `${at}.replaces[${i}]`);
        if (n === '') this.fail('should not have an empty replaces entry', `${at}.replaces[${i}]`);
        if (n === name) this.fail('replaces should not contain name of same descriptor', `${at}.replaces[${i}]`);
        replaces.push(n);
      });
    }
    const algorithmText = this.string(r, 'algorithm', at);
    const algorithm = (algorithmText === '' ? 'fixed_window' : algorithmText.toLowerCase()) as RlsAlgorithm;
    if (!ALGORITHMS.includes(algorithm)) this.fail(`invalid algorithm '${algorithmText}': one of ${ALGORITHMS.join(', ')}`, `${at}.algorithm`);
    const burstGiven = r.has('burst');
    if (burstGiven && !BURST_ALGORITHMS.includes(algorithm)) this.fail(`burst does not apply to algorithm '${algorithm}' (only ${BURST_ALGORITHMS.join(', ')})`, `${at}.burst`);
    // As RL.*'s BURST: the bucket's size, the limit itself unless given.
    const burst = burstGiven ? this.uint(r, 'burst', at, MAX_UINT32) : requestsPerUnit;
    if (burstGiven && burst < 1) this.fail('burst must be at least 1', `${at}.burst`);
    if (!unlimited && algorithm !== 'fixed_window') this.checkAlgorithm(algorithm, requestsPerUnit, burst, (unitSeconds ?? 0) * 1000, at);
    const allowDebt = this.bool(r, 'allow_debt', at);
    return {
      requestsPerUnit, unit: unlimited ? '' : unit, unitSeconds: unitSeconds ?? 0, unlimited, name, replaces,
      shadowMode, quotaMode, detailedMetric, algorithm, burst, allowDebt, fullKey,
    };
  }
}
