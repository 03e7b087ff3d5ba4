/**
 * Ports for the tests' processes. A server that can bind port 0 and say which port it got should
 * (cellgate's own `--port 0`); these are for ports a test must name before the process starts
 * (metrics-port and rls-port, where 0 means off; redis-server's). A named port can be taken by
 * someone else between the probe and the bind: both helpers draw at random from ports below the
 * kernel's ephemeral range, which outgoing connections (the suite makes thousands) never take, and
 * the Redis fixtures also retry a start that lost its port.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';

/** Whether `port` can be bound on 127.0.0.1 right now. */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/**
 * A random port in [low, high) that was free a moment ago; with `bus`, port + 10000 (a cluster
 * node's bus port) was free too.
 */
export async function randomFreePort(opts: { low?: number; high?: number; bus?: boolean } = {}): Promise<number> {
  const low = opts.low ?? 20_000;
  const high = opts.high ?? (opts.bus ? 50_000 : 60_000);
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (!(await portFree(port))) continue;
    if (opts.bus && !(await portFree(port + 10_000))) continue;
    return port;
  }
  throw new Error(`no free port found in [${low}, ${high})`);
}

/** The first port of the kernel's ephemeral range (Linux's ip_local_port_range; 32768 where it cannot be read). */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

const FREE_PORT_LOW = 20_000;

/**
 * A port that was free a moment ago, for a port a test must name. Not one the kernel picks (listen on
 * 0, then close): that is an ephemeral port, which the next outgoing connection may take before the
 * server binds it (seen: "cannot listen for metrics on port 40573: address already in use").
 */
export async function freePort(): Promise<number> {
  const high = ephemeralLow();
  if (high - FREE_PORT_LOW >= 1000) return randomFreePort({ low: FREE_PORT_LOW, high });
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as net.AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}
