/**
 * A Redis Cluster master marked down on its own (docs/backend.md, "Faults"): three calls in a row
 * that it did not answer within backend-timeout take only its slots out of play. Its calls get the
 * `backend-unavailable` policy at once while the other masters' keys stay decided on the backend;
 * a probe reloads the slot map and PINGs it until it answers, or until it serves no slot any more
 * (its replica took over, and its keys now go to the new master).
 */
import type { Cluster } from 'ioredis';
import type { Logger } from '../log.js';
import { MAX_PENDING_PER_NODE, PROBE_INTERVAL_MS, type NodeState } from './node-state.js';

/** What the down state needs of the backend. */
export interface NodeHost {
  after(name: string, ms: number, task: () => void): NodeJS.Timeout;
  log(): Logger;
  closed(): boolean;
  describe(): { display: string; policy: string };
  /** The Cluster client (null for one Redis: nothing to probe). */
  cluster(): Cluster | null;
  refreshSlots(): void;
}

/** A Cluster master that stopped answering: its slots' calls get the policy at once until it answers a PING or loses its slots. */
export function markNodeDown(h: NodeHost, node: NodeState, reason: string): void {
  if (node.down || h.closed()) return;
  node.down = true;
  const { display, policy } = h.describe();
  h.log().warning(`backend node ${node.key} down: ${reason}; its keys answered by backend-unavailable ${policy}`, { backend: display, node: node.key, reason });
  probeNode(h, node);
}

export function markNodeUp(h: NodeHost, node: NodeState, reason: string): void {
  if (!node.down) return;
  node.down = false;
  node.consecutiveTimeouts = 0;
  h.log().notice(`backend node ${node.key} up: ${reason}`, { backend: h.describe().display, node: node.key });
}

/**
 * While a Cluster node is down: every PROBE_INTERVAL_MS, reload the slot map; once the node serves
 * no slot (its replica took over) it is forgotten as down (its keys now go to the new master);
 * otherwise a PING, one at a time, brings it back when answered.
 */
function probeNode(h: NodeHost, node: NodeState): void {
  if (node.probing || h.closed()) return;
  node.probing = true;
  h.after('backend node probe', PROBE_INTERVAL_MS, () => {
    node.probing = false;
    const cluster = h.cluster();
    if (!node.down || h.closed() || cluster === null) return;
    h.refreshSlots();
    if (!cluster.slots.some((owners) => owners?.[0] === node.key)) {
      markNodeUp(h, node, 'its slots are served by another master now');
      return;
    }
    const redis = cluster.nodes('master').find((r) => `${r.options.host}:${r.options.port}` === node.key);
    if (redis !== undefined && redis.status === 'ready' && !node.pinging && node.pending < MAX_PENDING_PER_NODE) {
      node.pinging = true;
      node.pending++;
      redis.ping().then(
        () => {
          node.pinging = false;
          node.pending--;
          node.consecutiveTimeouts = 0;
          markNodeUp(h, node, 'PING answered');
        },
        () => {
          node.pinging = false;
          node.pending--;
        },
      );
    }
    probeNode(h, node);
  });
}
