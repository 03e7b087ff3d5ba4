/**
 * One backend node as the calls see it (src/backend/redis-backend.ts): what is pending on it, its
 * timeouts in a row and whether it is down, for a standalone Redis or each master of a Cluster.
 */

/** While down, a PING probe this often (ms). */
export const PROBE_INTERVAL_MS = 250;

/**
 * Calls sent to one node and not answered by it yet (those already answered by the policy after
 * backend-timeout included: the client still holds them until the node replies or the connection
 * closes). Past it, calls for that node get the policy at once: whatever a node does (paused,
 * partitioned), what the sidecar holds for it stays bounded.
 */
export const MAX_PENDING_PER_NODE = 2048;

/** One backend node as the calls see it: a standalone Redis, or one master of a Cluster. */
export interface NodeState {
  /** `host:port` (the Cluster client's node key), or `standalone`. */
  readonly key: string;
  /** Calls sent and not answered by the node yet. */
  pending: number;
  /** Limiter calls waiting in this turn's batch for the node (src/backend/limiter-batches.ts). */
  queued: number;
  consecutiveTimeouts: number;
  /** Cluster only (one Redis uses the backend's state): its calls get the policy at once. */
  down: boolean;
  probing: boolean;
  /** A probe PING sent and not answered yet: the next probe sends none (a paused node would queue them). */
  pinging: boolean;
}

export function newNode(key: string): NodeState {
  return { key, pending: 0, queued: 0, consecutiveTimeouts: 0, down: false, probing: false, pinging: false };
}
