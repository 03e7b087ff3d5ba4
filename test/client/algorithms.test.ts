/**
 * cellgate/client keeps its own list of algorithms (it imports nothing from the server, so a user's
 * bundle holds no server code); this ties that list to the server's registry
 * (src/limiters/registry.ts): the same algorithms in the same order, each sent as its RL.* command,
 * BURST accepted exactly where the server accepts it. The connection here records what the client
 * would send: what crosses the wire is test/client/client.test.ts's business.
 */
import { describe, expect, it } from 'vitest';
import { ALGORITHMS as CLIENT_ALGORITHMS, BURST_ALGORITHMS, CellgateArgumentError, CellgateClient } from '../../src/client/index.ts';
import { ALGORITHMS } from '../../src/limiters/registry.ts';

function recordingClient(): { client: CellgateClient; sent: string[][] } {
  const sent: string[][] = [];
  const connection = {
    call: async (command: string, ...args: string[]): Promise<unknown> => {
      sent.push([command, ...args]);
      const six = [0, 5, 4, -1, 1000, 0];
      return command === 'RL.ALL' ? [0, six] : six;
    },
  };
  return { client: new CellgateClient(connection), sent };
}

describe('the client\'s algorithm list', () => {
  it('names the registry\'s algorithms, in its order', () => {
    expect([...CLIENT_ALGORITHMS]).toEqual(ALGORITHMS.map((a) => a.typeName));
    expect([...BURST_ALGORITHMS]).toEqual(ALGORITHMS.filter((a) => a.acceptsBurst).map((a) => a.typeName));
  });

  it('sends each as its RL.* command, with BURST only where the registry accepts it', async () => {
    const { client, sent } = recordingClient();
    for (const algo of ALGORITHMS) {
      const name = algo.typeName as (typeof CLIENT_ALGORITHMS)[number];
      sent.length = 0;
      await client.rl(name, 'k', 5, 1000);
      expect(sent[0].slice(0, 4)).toEqual([`RL.${algo.name}`, 'k', '5', '1000']);
      const withBurst = client.rl(name, 'k', 5, 1000, { burst: 3 });
      if (algo.acceptsBurst) {
        await withBurst;
        expect(sent[1].slice(0, 6)).toEqual([`RL.${algo.name}`, 'k', '5', '1000', 'BURST', '3']);
      } else {
        await expect(withBurst, algo.name).rejects.toBeInstanceOf(CellgateArgumentError);
        expect(sent).toHaveLength(1);
      }
      // RL.ALL names the algorithm as its ALGO argument: the registry's name.
      sent.length = 0;
      await client.all([{ key: 'k', algorithm: name, limit: 5, periodMs: 1000 }]);
      expect(sent[0]).toContain(algo.name);
    }
  });
});
