/**
 * One memory account per client, as Redis's client_total_memory (getClientMemoryUsage, CLIENT LIST
 * tot-mem) and its client eviction (`maxmemory-clients`). docs/security.md and docs/commands.md
 * (CLIENT LIST) describe what users see.
 *
 * Each client owns one ClientMemory; every structure a client can grow reports its size there, at
 * the place where that size changes (never by a scan per command):
 *
 * - query: the unparsed input and the arguments of a command being parsed (RequestParser.heldBytes),
 *   refreshed when bytes arrive and after each batch of commands;
 * - output: replies not yet sent (socket buffers, this turn's replies, replies queued behind a
 *   backend call), refreshed after each batch and by the periodic task (a socket drains without a batch);
 * - deferred: backend calls in flight (Client.defer slots), per call;
 * - multi: the MULTI queue at its real size (Transaction.push);
 * - watch: WATCHed keys, key bytes plus the real per-entry cost (transaction.ts watchBytes);
 * - fields: name, lib-name, lib-ver;
 * - blocked: a waiting RL.ACQUIRE ... WAIT (its copied call and queue entry, src/server/lease-waiters.ts).
 *
 * The server keeps the sum (ClientsMemory). When a client grows the sum over `maxmemory-clients`,
 * the biggest clients are closed first until it is under the limit, as Redis's client eviction
 * (clients with CLIENT NO-EVICT on are skipped, as in Redis); the one growing is normally the
 * biggest, so it is the one closed. Each eviction is counted (INFO evicted_clients) and logged.
 */
import { getHeapStatistics } from 'node:v8';

/**
 * What a connected client costs before it holds anything: the Client object and its closures, the
 * socket with its handle and stream state, the parser and its CommandArgs (measured: ~3.4 KiB of
 * heap and array buffers per idle connection over 1,000 connections, V8 11 on x64).
 */
export const CLIENT_BASE_BYTES = 3584;
/**
 * One backend call in flight: its slot and reply closure here, the backend client's pending command,
 * promise and timer, and the script call's bytes waiting on the backend socket (measured: ~3.2 KB
 * each over 10,000 CL.THROTTLE calls to a stopped Redis; at most MAX_DEFERRED_REPLIES per client).
 */
export const DEFERRED_CALL_BYTES = 3200;

/**
 * The default `maxmemory-clients`: a quarter of the heap limit V8 reports. Client structures live
 * mostly on the V8 heap, and a heap that reaches its limit ends the process (Reached heap limit);
 * a quarter leaves the rest to the keyspace's index, garbage not yet collected and the collector's
 * own working room, even with the account under-counting by a quarter.
 */
export function defaultClientsMemoryBytes(): number {
  return Math.floor(getHeapStatistics().heap_size_limit / 4 / (1024 * 1024)) * 1024 * 1024;
}

export type AccountPart = 'query' | 'output' | 'deferred' | 'multi' | 'watch' | 'fields' | 'blocked';

export class ClientMemory {
  query = 0;
  output = 0;
  deferred = 0;
  multi = 0;
  watch = 0;
  fields = 0;
  /** A waiting RL.ACQUIRE's call (src/server/lease-waiters.ts). */
  blocked = 0;
  /** The sum of the parts plus CLIENT_BASE_BYTES (CLIENT LIST tot-mem). */
  total = CLIENT_BASE_BYTES;
  /** The client is gone or being closed: its account left the server's sum, later changes are ignored. */
  released = false;
}

/** What a client is to the account keeper: its account, and how to close it. */
export interface AccountHolder {
  readonly id: number;
  readonly addr: string;
  readonly memory: ClientMemory;
  readonly noEvict: boolean;
  evictForMemory(limitBytes: number): void;
}

export class ClientsMemory {
  /** Sum of every connected client's total. */
  total = 0;
  /** `maxmemory-clients` resolved to bytes (0 = off). */
  limitBytes = defaultClientsMemoryBytes();
  /** Clients closed because the sum went over the limit (INFO evicted_clients). */
  evictions = 0;

  constructor(private readonly clients: () => Iterable<AccountHolder>) {}

  /** A new client: its base cost joins the sum. */
  join(holder: AccountHolder): void {
    this.total += holder.memory.total;
    this.checkAfterGrowth();
  }

  /** Sets one part of `holder`'s account to `bytes`; over the limit, the biggest clients go. */
  set(holder: AccountHolder, part: AccountPart, bytes: number): void {
    const m = holder.memory;
    if (m.released) return;
    const delta = bytes - m[part];
    if (delta === 0) return;
    m[part] = bytes;
    m.total += delta;
    this.total += delta;
    if (delta > 0) this.checkAfterGrowth();
  }

  /** Adds `delta` to one part (a queued command, a watch). */
  change(holder: AccountHolder, part: AccountPart, delta: number): void {
    this.set(holder, part, holder.memory[part] + delta);
  }

  /** The client is going: its account leaves the sum (idempotent). */
  release(holder: AccountHolder): void {
    const m = holder.memory;
    if (m.released) return;
    m.released = true;
    this.total -= m.total;
  }

  /** The largest account among connected clients (INFO). */
  largest(): number {
    let max = 0;
    for (const c of this.clients()) if (!c.memory.released && c.memory.total > max) max = c.memory.total;
    return max;
  }

  /** A lowered limit (CONFIG SET): clients over it go now, not at their next growth. */
  enforce(): void {
    this.checkAfterGrowth();
  }

  private checkAfterGrowth(): void {
    if (this.limitBytes > 0 && this.total > this.limitBytes) this.evict();
  }

  /** Closes the biggest evictable clients until the sum is under the limit (Redis's evictClients). */
  private evict(): void {
    while (this.total > this.limitBytes) {
      let biggest: AccountHolder | null = null;
      for (const c of this.clients()) {
        if (c.noEvict || c.memory.released) continue;
        if (biggest === null || c.memory.total > biggest.memory.total) biggest = c;
      }
      if (biggest === null) return;
      this.evictions++;
      const limit = this.limitBytes;
      this.release(biggest);
      biggest.evictForMemory(limit);
    }
  }
}
