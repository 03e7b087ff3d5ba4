/**
 * Resets told to every sidecar of a backend (docs/backend.md, "Refusal cache"): DEL/UNLINK/FLUSHDB
 * and REFUND through any sidecar are published on `<prefix>__invalidate`, every sidecar's refusal
 * cache drops those keys and acknowledges, and the reset replies once all have (or after
 * backend-timeout). While the subscription is down nothing is cached: an invalidation could be missed.
 */
import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { RefusalCache } from './refusal-cache.js';

/** How long a sidecar heard on the invalidation channel counts as present (Cluster: whose acknowledgement a reset waits for). */
const PEER_TTL_MS = 60_000;

interface AckWait {
  /** Acknowledgements to wait for (-1 until PUBLISH answered how many received it). */
  need: number;
  got: number;
  done: () => void;
}

/** What the channel needs from the backend it belongs to. */
export interface InvalidationHost {
  /** A Cluster: PUBLISH counts only the receiving node's subscribers. */
  clusterMode: boolean;
  /** backend-timeout now (CONFIG SET changes it). */
  timeoutMs(): number;
  /** Runs `task` once after `ms` (exceptions logged, never fatal). */
  after(name: string, ms: number, task: () => void): NodeJS.Timeout;
  noteError(message: string): void;
}

export class InvalidationChannel {
  /** Invalidations heard (INFO backend). */
  received = 0;
  /** Invalidations whose acknowledgements did not all arrive within backend-timeout (INFO backend). */
  ackTimeouts = 0;
  /** This sidecar on the invalidation channel (random, per process). */
  private readonly sidecarId = randomBytes(8).toString('hex');
  private seq = 0;
  /** Invalidations this sidecar published, waiting for acknowledgements, by nonce. */
  private readonly ackWaits = new Map<string, AckWait>();
  /** Where the other sidecars acknowledge this one's invalidations. */
  private readonly ackChannel: string;
  /** Sidecars heard on the channel: id → when (ms). */
  private readonly peers = new Map<string, number>();

  constructor(
    private readonly channel: string,
    /** The backend's connection: PUBLISH. */
    private readonly publisher: Redis | Cluster,
    /** A connection of its own for SUBSCRIBE. */
    private readonly subscriber: Redis | Cluster,
    private readonly cache: RefusalCache,
    private readonly host: InvalidationHost,
  ) {
    this.ackChannel = `${channel}:${this.sidecarId}`;
    subscriber.on('ready', () => this.subscribe());
    subscriber.on('close', () => {
      // Invalidations could be missed from now on: forget what was cached and cache nothing until
      // the subscription is back.
      this.cache.enabled = false;
      this.cache.clear();
    });
    subscriber.on('error', () => {
      /* the main connection logs; this one only follows */
    });
    subscriber.on('messageBuffer', (channel: Buffer, message: Buffer) => this.onMessage(channel, message));
  }

  /**
   * Tells every sidecar (this one included) that these client keys were reset (an empty list: all of
   * them), and resolves once every sidecar subscribed has acknowledged that it dropped its cached
   * refusals of them, or after backend-timeout (never rejects). A reset command replies after this,
   * so a call sent to any sidecar after its reply cannot be answered by a refusal cached before it.
   *
   * On the channel, an invalidation is `I`, the nonce's length (one byte), the nonce (the sender's
   * id, `:`, a sequence number), then `A` (every key) or `K` and the keys as [4-byte length][bytes].
   * Its acknowledgement goes to the sender's own channel `<channel>:<id>` (so a reset costs one
   * message per sidecar, not one per pair): `a`, the nonce's length, the nonce, then the
   * acknowledging sidecar's id.
   */
  invalidate(keys: Buffer[]): Promise<void> {
    const nonce = Buffer.from(`${this.sidecarId}:${++this.seq}`, 'latin1');
    const head = Buffer.from([0x49, nonce.length]);
    const message = keys.length === 0
      ? Buffer.concat([head, nonce, Buffer.from('A')])
      : Buffer.concat([head, nonce, Buffer.from('K'), ...keys.flatMap((k) => [lengthPrefix(k.length), k])]);
    const id = nonce.toString('latin1');
    return new Promise((resolve) => {
      const waiting: AckWait = { need: -1, got: 0, done: () => {} };
      const finish = (): void => {
        clearTimeout(timer);
        this.ackWaits.delete(id);
        resolve();
      };
      waiting.done = finish;
      const timer = this.host.after('backend invalidation acks', this.host.timeoutMs(), () => {
        this.ackTimeouts++;
        finish();
      });
      this.ackWaits.set(id, waiting);
      this.publisher.publish(this.channel, message).then(
        (receivers: number) => {
          // One Redis counts every subscriber; a Cluster node only its own (the others hear it over
          // the cluster bus), so there the sidecars heard from lately count too.
          waiting.need = this.host.clusterMode ? Math.max(receivers, this.livePeers()) : receivers;
          if (waiting.got >= waiting.need) finish();
        },
        (e: Error) => {
          this.host.noteError(`publish: ${e.message}`);
          finish();
        },
      );
    });
  }

  /** Sidecars (this one included) heard on the channel within PEER_TTL_MS. */
  private livePeers(): number {
    const since = Date.now() - PEER_TTL_MS;
    let n = 0;
    for (const [id, at] of this.peers) {
      if (at >= since) n++;
      else this.peers.delete(id);
    }
    return n;
  }

  private onMessage(channel: Buffer, message: Buffer): void {
    const name = channel.toString('latin1');
    if ((name !== this.channel && name !== this.ackChannel) || message.length === 0) return;
    const kind = message[0];
    if (name === this.ackChannel) {
      if (kind !== 0x61 || message.length < 2) return;
      // An acknowledgement.
      const end = 2 + message[1];
      const wait = this.ackWaits.get(message.toString('latin1', 2, end));
      this.notePeer(message.toString('latin1', end));
      if (wait !== undefined && ++wait.got >= wait.need && wait.need >= 0) wait.done();
      return;
    }
    this.received++;
    if (kind === 0x49 && message.length >= 3) {
      const end = 2 + message[1];
      const nonce = message.subarray(2, end);
      this.notePeer(nonce.toString('latin1', 0, nonce.indexOf(0x3a)));
      if (message[end] === 0x41) this.cache.clear();
      else this.dropKeys(message, end + 1);
      // Dropped: say so (the resetting sidecar replies to its client once every sidecar has).
      const ack = Buffer.concat([Buffer.from([0x61, nonce.length]), nonce, Buffer.from(this.sidecarId, 'latin1')]);
      const origin = nonce.toString('latin1', 0, nonce.indexOf(0x3a));
      this.publisher.publish(`${this.channel}:${origin}`, ack).catch((e: Error) => this.host.noteError(`publish: ${e.message}`));
      return;
    }
    // The earlier format, without acknowledgements: `*`, or the keys alone.
    if (message.length === 1 && kind === 0x2a) this.cache.clear();
    else this.dropKeys(message, 0);
  }

  private notePeer(id: string): void {
    if (id === '') return;
    this.peers.set(id, Date.now());
    // Sidecars come and go (restarts): keep only those heard lately.
    if (this.peers.size > 4096) this.livePeers();
  }

  /** Drops the cached refusals of the keys listed from `at` as [4-byte length][key bytes]... */
  private dropKeys(message: Buffer, at: number): void {
    let i = at;
    while (i + 4 <= message.length) {
      const n = message.readUInt32BE(i);
      i += 4;
      if (i + n > message.length) break;
      this.cache.invalidateKey(message.toString('latin1', i, i + n));
      i += n;
    }
  }

  private subscribe(): void {
    this.subscriber.subscribe(this.channel, this.ackChannel).then(
      () => {
        this.cache.clear();
        this.cache.enabled = true;
      },
      (e: Error) => this.host.noteError(`subscribe: ${e.message}`),
    );
  }
}

function lengthPrefix(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n, 0);
  return b;
}
