/**
 * The key a request is counted under by default: the authenticated user, else the client IP, an
 * IPv6 client by its subnet.
 */
import { isIP } from 'node:net';
import type { IncomingHttpHeaders } from 'node:http';

/** What the default key function reads; every framework's request has these. */
export interface RequestLike {
  headers: IncomingHttpHeaders;
  ip?: string;
  socket?: { remoteAddress?: string };
  user?: { id?: unknown } | null;
}

/** The default key: the authenticated user, else the client IP (an IPv6 one by its subnet); never "undefined". */
export function defaultKey(req: RequestLike, ipv6Subnet: number | false = 56): string {
  const id = req.user?.id;
  if (id !== undefined && id !== null && String(id) !== '') return `user:${String(id)}`;
  const ip = req.ip ?? req.socket?.remoteAddress;
  return ip ? `ip:${ipKey(ip, ipv6Subnet)}` : 'ip:unknown';
}

/**
 * An IPv4 address as it is; an IPv4-mapped IPv6 one as IPv4; an IPv6 one as its first `bits` bits
 * (`2001:db8:1:ab00:0:0:0:0/56`), since one customer usually holds a whole /56 or /48 and would
 * otherwise have 2^72 buckets.
 */
export function ipKey(ip: string, bits: number | false): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1];
  if (bits === false || isIP(ip) !== 6) return ip;
  const words = ipv6Words(ip);
  if (words === undefined) return ip;
  for (let i = 0; i < 8; i++) {
    const keep = Math.max(0, Math.min(16, bits - i * 16));
    words[i] &= keep === 0 ? 0 : (0xffff << (16 - keep)) & 0xffff;
  }
  return `${words.map((w) => w.toString(16)).join(':')}/${bits}`;
}

/** The eight 16-bit words of an IPv6 address (zone dropped, `::` and a dotted IPv4 tail expanded). */
function ipv6Words(ip: string): number[] | undefined {
  let s = ip.replace(/%.*$/, '');
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const b = v4.slice(1).map(Number);
    s = `${s.slice(0, v4.index)}${((b[0] << 8) | b[1]).toString(16)}:${((b[2] << 8) | b[3]).toString(16)}`;
  }
  const [head, tail] = s.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const words = [...h, ...Array<string>(fill).fill('0'), ...t].map((w) => parseInt(w, 16));
  return words.length === 8 && words.every((w) => Number.isInteger(w)) ? words : undefined;
}
