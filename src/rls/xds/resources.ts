/**
 * The resources of one xDS response → the configuration the service uses, or the reason to refuse
 * them (sent back as the NACK's error_detail).
 *
 * Each resource is a `RateLimitConfig` (one domain). It is turned into the document a YAML file of
 * `rls-config` decodes to, field for field as envoyproxy/ratelimit's ConfigXdsProtoToYaml does, and
 * validated by the same loader (src/rls/config.ts): a resource passes exactly the checks a file
 * passes, with the same messages, prefixed by the resource's name. The message has no place for
 * cellgate's `rate_limit` extensions (`algorithm`, `burst`...): they ride in the descriptor's
 * `metadata` under the key `cellgate` (docs/envoy.md, "Configuration over xDS"), and are checked as
 * keys of `rate_limit`. The rest of `metadata` is not used, as in files.
 *
 * Bounds (besides rls-xds-max-message-bytes on the whole message): MAX_RESOURCES resources,
 * MAX_DESCRIPTORS descriptors in all, nested at most MAX_DEPTH deep; every walk here is linear in
 * the message.
 */
import { RlsConfigError, rlsDomainFromValue, type RlsDomain } from '../config.js';
import { decodeRateLimitConfig, RATE_LIMIT_CONFIG_TYPE, type AnyMessage, type RateLimitDescriptorMessage, type StructMessage, type StructValue } from './protos.js';

export const MAX_RESOURCES = 1000;
export const MAX_DESCRIPTORS = 100_000;
export const MAX_DEPTH = 64;
/** The key of a descriptor's `metadata` that carries cellgate's `rate_limit` extensions. */
export const EXTENSION_KEY = 'cellgate';
/** RateLimitPolicy's own fields: the message carries them, the extension may not repeat them. */
const POLICY_FIELDS = new Set(['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces']);

/** Resources refused before (or besides) the loader's checks; RlsConfigError for the loader's. */
export class XdsResourceError extends Error {}

/** The count bound, checked before anything is decoded. */
export function checkResourceCount(resources: readonly AnyMessage[]): void {
  if (resources.length > MAX_RESOURCES) throw new XdsResourceError(`${resources.length} resources in one response, more than ${MAX_RESOURCES}`);
}

/**
 * The domains the resources make, each validated as a file is (validation.ts runs this in a worker
 * thread; rlsConfigOf then makes them one configuration). Throws XdsResourceError or
 * RlsConfigError, whose message names the resource and the place in it.
 */
export function domainsFromResources(resources: readonly AnyMessage[]): RlsDomain[] {
  checkResourceCount(resources);
  const budget = { descriptors: 0 };
  return resources.map((resource, i) => {
    if (resource.type_url !== RATE_LIMIT_CONFIG_TYPE) {
      throw new XdsResourceError(`resources[${i}]: mismatched message type: got "${resource.type_url}" want "${RATE_LIMIT_CONFIG_TYPE}"`);
    }
    let message;
    try {
      message = decodeRateLimitConfig(resource.value);
    } catch (e) {
      throw new XdsResourceError(`resources[${i}]: not a RateLimitConfig: ${(e as Error).message}`);
    }
    const source = message.name !== '' ? message.name : `resources[${i}]`;
    const document = new DocumentBuilder(source, budget).document(message.domain, message.descriptors);
    return rlsDomainFromValue(source, document);
  });
}

/** A message's fields as the document a YAML file holds: defaults left out, as a file leaves them out. */
class DocumentBuilder {
  constructor(
    private readonly source: string,
    private readonly budget: { descriptors: number },
  ) {}

  private fail(text: string, at: string): never {
    throw new RlsConfigError(`${this.source}: ${text} (at ${at})`);
  }

  document(domain: string, descriptors: RateLimitDescriptorMessage[]): Record<string, unknown> {
    const out: Record<string, unknown> = { domain };
    if (descriptors.length > 0) out.descriptors = this.descriptors(descriptors, 'descriptors', 1);
    return out;
  }

  private descriptors(list: RateLimitDescriptorMessage[], at: string, depth: number): Record<string, unknown>[] {
    if (depth > MAX_DEPTH) this.fail(`descriptors nested more than ${MAX_DEPTH} deep`, at);
    this.budget.descriptors += list.length;
    if (this.budget.descriptors > MAX_DESCRIPTORS) this.fail(`more than ${MAX_DESCRIPTORS} descriptors in all`, at);
    return list.map((d, i) => this.descriptor(d, `${at}[${i}]`, depth));
  }

  private descriptor(d: RateLimitDescriptorMessage, at: string, depth: number): Record<string, unknown> {
    const out: Record<string, unknown> = { key: d.key };
    if (d.value !== '') out.value = d.value;
    const extensions = this.extensions(d.metadata, `${at}.metadata.${EXTENSION_KEY}`);
    if (d.rate_limit !== null) {
      const p = d.rate_limit;
      // As ConfigXdsProtoToYaml: the unit's name even when unset (UNKNOWN, refused unless unlimited).
      const rl: Record<string, unknown> = { unit: p.unit, requests_per_unit: p.requests_per_unit };
      if (p.unlimited) rl.unlimited = true;
      if (p.name !== '') rl.name = p.name;
      if (p.replaces.length > 0) rl.replaces = p.replaces.map((r) => ({ name: r.name }));
      for (const [k, v] of extensions) rl[k] = v;
      out.rate_limit = rl;
    } else if (extensions.size > 0) {
      this.fail(`metadata.${EXTENSION_KEY} given without a rate_limit`, `${at}.metadata.${EXTENSION_KEY}`);
    }
    if (d.descriptors.length > 0) out.descriptors = this.descriptors(d.descriptors, `${at}.descriptors`, depth + 1);
    if (d.shadow_mode) out.shadow_mode = true;
    if (d.detailed_metric) out.detailed_metric = true;
    if (d.quota_mode) out.quota_mode = true;
    return out;
  }

  /** `metadata.cellgate`'s fields as `rate_limit` keys (strings, numbers, booleans). */
  private extensions(metadata: StructMessage | null, at: string): Map<string, string | number | boolean> {
    const out = new Map<string, string | number | boolean>();
    const entry = metadata?.fields?.[EXTENSION_KEY];
    if (entry === undefined) return out;
    if (entry.structValue === undefined) this.fail(`metadata.${EXTENSION_KEY} must be a struct of rate_limit keys`, at);
    for (const [key, value] of Object.entries(entry.structValue.fields ?? {})) {
      if (POLICY_FIELDS.has(key)) this.fail(`'${key}' is a field of the RateLimitPolicy message: set it there`, `${at}.${key}`);
      out.set(key, scalar(value) ?? this.fail(`'${key}' must be a string, a number or a boolean`, `${at}.${key}`));
    }
    return out;
  }
}

function scalar(v: StructValue): string | number | boolean | null {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return null;
}
