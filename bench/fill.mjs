/**
 * Fills a cellgate with CL.THROTTLE keys fast: one raw socket, commands pipelined in batches of
 * 10,000, replies counted as they stream back (every CL.THROTTLE reply starts with `*5\r\n`).
 * A million keys take a couple of seconds. Shared by the benchmarks and the persistence tests.
 */
import net from 'node:net';

/**
 * Sends `CL.THROTTLE <prefix><i> <burst> <count> <period>` for i in [0, n) and resolves once all n
 * replies are in. The defaults make keys that live about an hour (101 tokens, one per hour).
 * `digits` pads i with zeros: RAND_DIGITS names the keys as redis-benchmark's `__rand_int__` does,
 * so that its later commands land on the keys filled here.
 */
export const RAND_DIGITS = 12;

export function fillThrottleKeys(port, n, { prefix = 'key:', burst = 100, count = 1, period = 3600, digits = 0 } = {}) {
  const tail = [burst, count, period].map((a) => `$${String(a).length}\r\n${a}\r\n`).join('');
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let replies = 0;
    let carry = '';
    sock.on('error', reject);
    sock.on('data', (d) => {
      const s = carry + d.toString('latin1');
      let i = 0;
      for (;;) {
        const j = s.indexOf('*5\r\n', i);
        if (j < 0) break;
        replies++;
        i = j + 4;
      }
      carry = s.slice(Math.max(i, s.length - 3));
      if (replies >= n) {
        sock.end();
        resolve();
      }
    });
    sock.on('connect', async () => {
      for (let i = 0; i < n; i += 10_000) {
        let out = '';
        for (let k = i; k < Math.min(n, i + 10_000); k++) {
          const key = prefix + String(k).padStart(digits, '0');
          out += `*5\r\n$11\r\nCL.THROTTLE\r\n$${key.length}\r\n${key}\r\n${tail}`;
        }
        if (!sock.write(out)) await new Promise((r) => sock.once('drain', r));
      }
    });
  });
}
