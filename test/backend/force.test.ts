/**
 * `COST n FORCE`: usage charged after the fact is recorded even beyond the limit, as debt, in every
 * RL.* algorithm; the next calls wait exactly until it is repaid. On a local cellgate and through a
 * backend (two sidecars on a real redis-server, the charge through one, the calls after it through
 * the other), clocks frozen at the same instants (DEBUG CLOCK SET).
 *
 * The scenario for each algorithm: a limit of 100 per second, a fresh key (100 remaining), a forced
 * charge of 10,000 at T0 (a window start). The forced reply says limited, remaining 0, and the wait R
 * until one unit fits again; a call of cost 1 at T0 is refused with the same R, at T0 + R − 1 it is
 * still refused (retry_after 1), at T0 + R it is allowed. R per algorithm (its own debt):
 * - token bucket, leaky bucket, GCRA: 9,900 units owed beyond empty at 0.1 per ms (99,000 ms), then
 *   that unit's refill (10 ms): 99,010;
 * - fixed window: the window's count is over until the window ends (as envoyproxy/ratelimit counts): 1,000;
 * - sliding window counter: the next window, until 10,000·(1 − e/1000) + 1 ≤ 100, e = 991: 1,991;
 * - sliding log: the entry slides out a period later: 1,000.
 * Without FORCE the same charge is refused and spends nothing (the next call of 1 leaves 99).
 */
import { describe, expect, it } from 'vitest';
import { backendInfo, freezeClocks, frozenInstant, useLocalAndPair, type Sidecar } from './helpers.js';

const T0 = frozenInstant();
const env = useLocalAndPair();

const CASES: { cmd: string; args: string[]; repayMs: number }[] = [
  { cmd: 'RL.TOKENBUCKET', args: ['100', '1000'], repayMs: 99_010 },
  { cmd: 'RL.LEAKYBUCKET', args: ['100', '1000'], repayMs: 99_010 },
  { cmd: 'RL.GCRA', args: ['100', '1000'], repayMs: 99_010 },
  { cmd: 'RL.FIXEDWINDOW', args: ['100', '1000'], repayMs: 1_000 },
  { cmd: 'RL.SLIDINGWINDOW', args: ['100', '1000'], repayMs: 1_991 },
  { cmd: 'RL.SLIDINGLOG', args: ['100', '1000'], repayMs: 1_000 },
];

type Six = [number, number, number, number, number, number];

/** One call at `atMs` on every server of `servers` (each at its own clock, all frozen there). */
async function at(servers: Sidecar[], atMs: number, cmd: string, key: string, args: string[]): Promise<Six[]> {
  await freezeClocks(servers, atMs);
  return (await Promise.all(servers.map((s) => s.admin.call(cmd, key, ...args)))) as Six[];
}

/** One call through `via` at `atMs`, every clock of `clocks` frozen there. */
async function one(clocks: Sidecar[], via: Sidecar, atMs: number, cmd: string, key: string, args: string[]): Promise<Six> {
  await freezeClocks(clocks, atMs);
  return (await via.admin.call(cmd, key, ...args)) as Six;
}

/** The scenario on one server (local or a sidecar), its charge through `charger`, the rest through `reader`. */
async function scenario(charger: Sidecar, reader: Sidecar, cmd: string, key: string, args: string[], repayMs: number): Promise<void> {
  const clocks = charger === reader ? [charger] : [charger, reader];
  const peek = await one(clocks, charger, T0, cmd, key, [...args, 'COST', '0']);
  expect(peek.slice(0, 3), 'a fresh key: 100 remaining').toEqual([0, 100, 100]);
  const charged = await one(clocks, charger, T0, cmd, key, [...args, 'COST', '10000', 'FORCE']);
  expect([charged[0], charged[2], charged[3]], 'the forced reply: limited, nothing left, the wait').toEqual([1, 0, repayMs]);
  const now = await one(clocks, reader, T0, cmd, key, args);
  expect([now[0], now[2], now[3]], 'at T0: refused, the repayment time').toEqual([1, 0, repayMs]);
  const justBefore = await one(clocks, reader, T0 + repayMs - 1, cmd, key, args);
  expect([justBefore[0], justBefore[3]], '1 ms before: still refused').toEqual([1, 1]);
  const then = await one(clocks, reader, T0 + repayMs, cmd, key, args);
  expect(then[0], 'at the repayment instant: allowed').toBe(0);
}

describe('COST n FORCE: a charge beyond the limit is debt, repaid exactly', () => {
  for (const { cmd, args, repayMs } of CASES) {
    it(`${cmd}: locally`, async () => {
      await scenario(env.local, env.local, cmd, `force:local:${cmd}`, args, repayMs);
    });

    it(`${cmd}: through a backend (charged through one sidecar, read through the other)`, async () => {
      await scenario(env.sidecars[0], env.sidecars[1], cmd, `force:backend:${cmd}`, args, repayMs);
      for (const s of env.sidecars) expect((await backendInfo(s)).backend_policy_decisions).toBe('0');
    });

    it(`${cmd}: without FORCE the charge is refused and spends nothing (local and backend alike)`, async () => {
      const key = `force:unmarked:${cmd}`;
      const servers = [env.local, env.sidecars[0]];
      const refused = await at(servers, T0, cmd, key, [...args, 'COST', '10000']);
      for (const r of refused) expect(r[0]).toBe(1);
      const next = await at(servers, T0, cmd, key, args);
      for (const r of next) expect([r[0], r[2]]).toEqual([0, 99]);
    });
  }

  it('a forced charge that fits is an ordinary allowed call', async () => {
    const servers = [env.local, env.sidecars[0]];
    const replies = await at(servers, T0, 'RL.TOKENBUCKET', 'force:fits', ['100', '1000', 'COST', '40', 'FORCE']);
    for (const r of replies) expect(r.slice(0, 4)).toEqual([0, 100, 60, -1]);
  });

  it('FORCE is refused with REFUND, twice, and in RL.ALL', async () => {
    const c = env.local.admin;
    await expect(c.call('RL.TOKENBUCKET', 'force:syntax', '1', '1000', 'REFUND', '1', 'FORCE')).rejects.toThrow(/syntax error/);
    await expect(c.call('RL.TOKENBUCKET', 'force:syntax', '1', '1000', 'FORCE', 'REFUND', '1')).rejects.toThrow(/syntax error/);
    await expect(c.call('RL.TOKENBUCKET', 'force:syntax', '1', '1000', 'FORCE', 'COST', '2', 'FORCE')).rejects.toThrow(/syntax error/);
    await expect(c.call('RL.ALL', '1', 'force:syntax', 'TOKENBUCKET', '1', '1000', 'FORCE')).rejects.toThrow(/syntax error/);
  });

  it('huge forced charges saturate: counted, refused for the rest, and the key stays a valid state', async () => {
    const servers = [env.local, env.sidecars[0]];
    for (const [cmd, args] of [['RL.FIXEDWINDOW', ['100', '1000']], ['RL.TOKENBUCKET', ['100', '1000']], ['RL.SLIDINGWINDOW', ['100', '1000']], ['RL.GCRA', ['100', '1000']], ['RL.SLIDINGLOG', ['100', '1000']]] as const) {
      const key = `force:huge:${cmd}`;
      const charged = await at(servers, T0, cmd, key, [...args, 'COST', String(Number.MAX_SAFE_INTEGER), 'FORCE']);
      expect(charged[1], `${cmd}: backend equals local`).toEqual(charged[0]);
      expect(charged[0][0]).toBe(1);
      const again = await at(servers, T0 + 1, cmd, key, [...args, 'COST', String(Number.MAX_SAFE_INTEGER), 'FORCE']);
      expect(again[1], `${cmd}: backend equals local, again`).toEqual(again[0]);
      const next = await at(servers, T0 + 2, cmd, key, [...args]);
      expect(next[1]).toEqual(next[0]);
      expect(next[0][0], `${cmd}: refused after`).toBe(1);
    }
  });
});
