/**
 * The warm-up before the port opens: pipelined limiter calls run through the real path (a Client's
 * input handler, the request parser, dispatch, the limiters, the keyspace, the reply writer) on a
 * scratch server, so V8 has compiled and optimized that path before the first client arrives. Without
 * it the first seconds of load after a start saw a max latency of 100–250 ms (functions compiled,
 * optimized and deoptimized for missing type feedback while clients waited); see docs/benchmarks.md.
 *
 * It leaves no trace on the real server: the scratch server has its own keyspace, stats, slow log,
 * latency histograms and reply writer, and the scratch client is never registered nor connected (its
 * socket is destroyed before it is used, so nothing is written anywhere). The only state shared is
 * module scratch of the command handlers (parse caches and decision buffers, rewritten on every call)
 * and the limiter counters' cached stats, which a Stats generation unique to each instance turns stale.
 */
import { ALGORITHMS } from '../limiters/registry.js';
import net from 'node:net';
import { Client } from './client.js';
import { Server } from './server.js';

/** Passes of the warm-up at start (see warmUp). */
export const WARMUP_ROUNDS = 10;

/** Keys per round: a working set that creates, finds and refuses keys, like a real load. */
const WARMUP_KEYS = 1024;
/** Commands per simulated read (redis-benchmark's -P 16) and one-command reads (pipeline 1). */
const PIPELINE = 16;

/** The request bytes of `args` in RESP, as a client library sends them. */
function encode(args: string[]): string {
  let out = `*${args.length}\r\n`;
  for (const a of args) out += `$${Buffer.byteLength(a, 'latin1')}\r\n${a}\r\n`;
  return out;
}

/**
 * The commands of one round for key `k`: CL.THROTTLE in both of its forms and two limits (allowed
 * until the burst is spent, then refused), GCRA and every RL.* limiter (its entry's sample call), RL.ALL
 * over every algorithm, and PING.
 */
function commandsFor(k: number): string[][] {
  const key = `warmup:${k}`;
  const all = ['RL.ALL', String(ALGORITHMS.length)];
  // RL.ALL takes limit and period_ms (and BURST) per limit, its COST only at the end.
  for (const algo of ALGORITHMS) all.push(`${key}:all:${algo.typeName}`, algo.name, algo.warmupArgs[0], algo.warmupArgs[1]);
  return [
    ['CL.THROTTLE', key, '100', '1000', '60', '1'],
    ['CL.THROTTLE', `${key}:b`, '15', '30', '86400'],
    ['CL.THROTTLE', `${key}:c`, '10', '5'],
    ['GCRA', `${key}:g`, '10', '100', '60'],
    ...ALGORITHMS.map((algo) => [`RL.${algo.name}`, `${key}:${algo.typeName}`, ...algo.warmupArgs]),
    all,
    ['PING'],
  ];
}

/** Connections and round trips of the loopback part (see warmUpSockets). */
const SOCKET_CLIENTS = 8;
const SOCKET_ROUND_TRIPS = 100;
const SOCKET_TIMEOUT_MS = 3000;
const PONG = Buffer.from('+PONG\r\n');

/**
 * The socket half of the path, which the synchronous part cannot reach: accepting connections,
 * Node's stream reads and writes, the replies written at the end of the event-loop turn. A few
 * connections over loopback to a listener of the scratch server on a port chosen by the kernel,
 * each sending pipelined CL.THROTTLE batches ended by a PING and waiting for the PONG. A connection
 * from anyone else (the port exists for a fraction of a second) is closed at once, unserved.
 */
async function warmUpSockets(scratch: Server, batch: Buffer): Promise<void> {
  const ours = new Set<number>();
  const listener = net.createServer({ noDelay: true }, (socket) => {
    if (!ours.has(socket.remotePort ?? -1)) {
      socket.destroy();
      return;
    }
    const client = new Client(ours.size, socket, scratch);
    client.authenticated = true;
    sockets.push(socket);
  });
  const closed = new Promise<void>((resolve) => listener.once('close', resolve));
  try {
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen({ host: '127.0.0.1', port: 0 }, resolve);
    });
  } catch {
    return; // no loopback to warm up over: the synchronous part has run
  }
  const port = (listener.address() as net.AddressInfo).port;
  const request = Buffer.concat([batch, Buffer.from('*1\r\n$4\r\nPING\r\n')]);
  const runs: Promise<void>[] = [];
  const sockets: net.Socket[] = [];
  for (let c = 0; c < SOCKET_CLIENTS; c++) {
    runs.push(
      new Promise<void>((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port });
        sockets.push(socket);
        socket.setNoDelay(true);
        let left = SOCKET_ROUND_TRIPS;
        let tail = Buffer.alloc(0);
        const done = (): void => {
          socket.destroy();
          resolve();
        };
        socket.once('connect', () => {
          ours.add(socket.localPort ?? -1);
          socket.write(request);
        });
        socket.on('data', (chunk: Buffer) => {
          tail = Buffer.concat([tail, chunk]).subarray(-PONG.length);
          if (!tail.equals(PONG)) return;
          tail = Buffer.alloc(0);
          if (--left === 0) done();
          else socket.write(request);
        });
        socket.once('error', done);
        socket.once('close', done);
      }),
    );
  }
  // Loopback answers in well under a second even on a busy machine; a connection that does not is
  // given up on (the warm-up is an optimization, never a reason for the start to wait).
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, SOCKET_TIMEOUT_MS);
  });
  await Promise.race([Promise.all(runs), timeout]);
  clearTimeout(timer);
  for (const socket of sockets) socket.destroy();
  listener.close();
  await closed;
}

/**
 * Runs the warm-up: `rounds` passes over WARMUP_KEYS keys, each pass the pipelined reads of one
 * command kind after another (the way a benchmark or a busy service sends them), then single-command
 * reads, then the loopback part (warmUpSockets). It runs before the real server listens.
 */
export async function warmUp(real: Server, rounds: number): Promise<WarmUpResult> {
  const scratch = new Server(real.config, real.log);
  // As after the snapshot load: a server that has not loaded one answers LOADING to everything.
  scratch.snapshots.loading = false;
  scratch.snapshots.refreshDenyWrites();
  // A server that will journal (appendonly yes) records every limiter write: so does the scratch
  // one, into no file, its records dropped after every flush.
  const journaled = real.config.bool('appendonly');
  const journal = scratch.journal;
  journal.recordWithoutFiles(journaled);
  const flush = (): void => {
    scratch.flushPending();
    journal.dropRecords();
  };
  const socket = new net.Socket();
  socket.destroy();
  const client = new Client(0, socket, scratch);
  client.authenticated = true; // the scratch server knows no password: the real one's requirepass must not refuse the warm-up
  // onData is the socket's 'data' handler: the same entry a real read takes.
  const feed = (client as unknown as { onData(chunk: Buffer): void }).onData.bind(client);
  const kinds = commandsFor(0).length;
  const batches: Buffer[][] = [];
  for (let kind = 0; kind < kinds; kind++) {
    const reads: Buffer[] = [];
    for (let k = 0; k < WARMUP_KEYS; k += PIPELINE) {
      let text = '';
      for (let j = k; j < k + PIPELINE; j++) text += encode(commandsFor(j)[kind]);
      reads.push(Buffer.from(text, 'latin1'));
    }
    batches.push(reads);
  }
  const singles = batches[0][0];
  for (let round = 0; round < rounds; round++) {
    for (const reads of batches) {
      for (const read of reads) feed(read);
    }
    flush();
    // Pipeline 1: one command per read, and a request split across two reads.
    for (let at = 0; at < singles.length; ) {
      const end = singles.indexOf('*', at + 1);
      feed(singles.subarray(at, end === -1 ? singles.length : end));
      flush();
      at = end === -1 ? singles.length : end;
    }
    feed(singles.subarray(0, 7));
    feed(singles.subarray(7));
    flush();
  }
  await warmUpSockets(scratch, singles);
  journal.recordWithoutFiles(false);
  return { journalRecords: journal.recorder.records };
}

export interface WarmUpResult {
  /** Journal records the scratch server encoded (and dropped): 0 unless the server journals. */
  journalRecords: number;
}
