/**
 * The clients' memory account (src/server/client-memory.ts) against the memory really used: random
 * mixes of queued commands (random argument counts and sizes), WATCHes, client names and pipelined
 * replies left unread grow a real server; the growth of INFO clients_total_memory must be within 25%
 * of the growth of used_memory_heap (heapUsed + arrayBuffers after DEBUG GC, a full collection).
 * CELLGATE_SOAK=1 runs more mixes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { setTimeout as delay } from 'node:timers/promises';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, infoField, mbulk } from '../helpers/raw.js';

const RUNS = process.env.CELLGATE_SOAK === '1' ? 25 : 4;

let server: RunningServer;
let control: Checker;
beforeAll(async () => {
  server = await startServer({ args: ['--maxmemory-clients', '0'] });
  control = await Checker.open(server.port);
});
afterAll(async () => {
  control.close();
  await server.stop();
});

interface Plan {
  /** Commands queued in MULTI: [argument count, bytes per argument]. */
  queued: [number, number][];
  /** WATCHed keys: how many, and their length. */
  watch: [number, number];
  nameBytes: number;
  /** ECHOs of this many bytes sent without reading a reply (0 = none). */
  unread: [number, number];
}

const planArb: fc.Arbitrary<Plan> = fc.record({
  queued: fc.array(fc.tuple(fc.integer({ min: 1, max: 400 }), fc.integer({ min: 1, max: 3000 })), { minLength: 0, maxLength: 60 }),
  watch: fc.tuple(fc.integer({ min: 0, max: 30_000 }), fc.integer({ min: 4, max: 64 })),
  nameBytes: fc.integer({ min: 0, max: 4096 }),
  unread: fc.tuple(fc.integer({ min: 0, max: 400 }), fc.integer({ min: 1000, max: 20_000 })),
});

async function measure(): Promise<{ used: number; account: number }> {
  // Sockets drain and the periodic task refreshes the output accounts (hz 10): let it run.
  await delay(250);
  await control.call('DEBUG', 'GC');
  await control.call('DEBUG', 'GC');
  const memory = await control.call('INFO', 'memory');
  const clients = await control.call('INFO', 'clients');
  return { used: Number(infoField(memory, 'used_memory_heap')), account: Number(infoField(clients, 'clients_total_memory')) };
}

/** Waits until the server stopped taking in what `conn` sent (its qbuf and omem stay put). */
async function settled(id: number): Promise<void> {
  let last = '';
  for (let i = 0; i < 200; i++) {
    const line = String(await control.call('CLIENT', 'LIST', 'ID', String(id)));
    const now = `${/ qbuf=(\d+)/.exec(line)?.[1]} ${/ omem=(\d+)/.exec(line)?.[1]}`;
    if (now === last) return;
    last = now;
    await delay(30);
  }
}

async function run(plans: Plan[], seed: number): Promise<{ used: number; account: number }> {
  const before = await measure();
  const conns: RawConnection[] = [];
  for (const [n, plan] of plans.entries()) {
    const conn = await RawConnection.open(server.port);
    conns.push(conn);
    const c = Checker.wrap(conn);
    const id = (await c.call('CLIENT', 'ID')) as number;
    if (plan.nameBytes > 0) expect(await c.call('CLIENT', 'SETNAME', 'n'.repeat(plan.nameBytes))).toBe('OK');
    for (let i = 0; i < plan.watch[0]; i += 5000) {
      const keys = Array.from({ length: Math.min(5000, plan.watch[0] - i) }, (_, j) => `${seed}:${n}:${i + j}:`.padEnd(plan.watch[1], 'k'));
      expect(await c.call('WATCH', ...keys)).toBe('OK');
    }
    if (plan.queued.length > 0) {
      expect(await c.call('MULTI')).toBe('OK');
      for (const [argc, size] of plan.queued) {
        const start = conn.length;
        await conn.write(mbulk('DEL', ...Array.from({ length: argc }, (_, j) => `${j}`.padEnd(size, 'a'))));
        await conn.waitFor(() => conn.length >= start + 9, 10_000, 'QUEUED');
      }
    }
    if (plan.unread[0] > 0) {
      // Replies left unread: this client stops reading; the server holds its output, then its input.
      conn.socket.pause();
      const echo = mbulk('ECHO', 'e'.repeat(plan.unread[1]));
      void conn.write(Buffer.concat(Array(plan.unread[0]).fill(echo)));
      await settled(id);
    }
  }
  const after = await measure();
  for (const conn of conns) conn.destroy();
  // The next run starts from the same place: the closed clients' memory is gone.
  for (let i = 0; i < 100 && Number(infoField(await control.call('INFO', 'clients'), 'connected_clients')) > 1; i++) await delay(20);
  return { used: after.used - before.used, account: after.account - before.account };
}

describe('client memory account (property)', () => {
  it('the account grows within 25% of the measured heap growth, whatever the mix', async () => {
    const seen: string[] = [];
    await fc.assert(
      fc.asyncProperty(fc.array(planArb, { minLength: 1, maxLength: 4 }), fc.integer({ min: 0, max: 1e9 }), async (plans, seed) => {
        // A mix too small to measure against a GC's noise gets a floor: one client watching 20,000 keys.
        const withFloor = plans.concat([{ queued: [[50, 1000], [50, 1000]], watch: [20_000, 16], nameBytes: 0, unread: [0, 0] }]);
        const { used, account } = await run(withFloor, seed);
        seen.push(`${(account / 2 ** 20).toFixed(1)}/${(used / 2 ** 20).toFixed(1)}`);
        expect(used).toBeGreaterThan(2 * 1024 * 1024);
        expect(Math.abs(account - used)).toBeLessThanOrEqual(0.25 * used);
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
    console.log(`[attack] client memory account vs used_memory_heap growth (MiB, account/measured) over ${RUNS} random mixes: ${seen.join(', ')}`);
  }, 300_000);
});
