/**
 * Whether the rate limit configuration comes from an xDS server, and the combinations of its
 * settings that refuse the start (docs/envoy.md, "Configuration over xDS"). Apart from the client
 * (source.ts), which the server loads only when `rls-xds-server` is set.
 */
import type { Config } from '../../config.js';

/** Whether the configuration comes from xDS. */
export function xdsWanted(config: Config): boolean {
  return config.get('rls-xds-server').trim() !== '';
}

/** Start-up: a combination of xDS settings that cannot be honoured, or null. */
export function xdsRefusal(config: Config): string | null {
  if (!xdsWanted(config)) return null;
  if (config.get('rls-config') !== '') {
    return 'rls-config and rls-xds-server are both set: the rate limit configuration comes from files or from an xDS server, never from both (docs/envoy.md)';
  }
  const cert = config.get('rls-xds-tls-cert-file');
  const key = config.get('rls-xds-tls-key-file');
  if (config.bool('rls-xds-tls') && (cert === '') !== (key === '')) {
    return `rls-xds-tls-${cert === '' ? 'key' : 'cert'}-file is set without rls-xds-tls-${cert === '' ? 'cert' : 'key'}-file: a client certificate needs both`;
  }
  if (/\s/.test(config.get('rls-xds-server').trim())) return `rls-xds-server '${config.get('rls-xds-server')}' is not one host:port`;
  return null;
}
