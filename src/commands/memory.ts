/**
 * MEMORY USAGE / STATS / DOCTOR / MALLOC-STATS / PURGE / HELP in Redis's reply shapes, so
 * `redis-cli --memkeys`/`--bigkeys` and dashboards work. The numbers are the keyspace's own counts
 * (what maxmemory limits: see docs/operations.md), not an allocator's.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { lookupKeyArg } from './args.js';
import { replyHelp } from './help.js';
import { processMemory } from '../server/memory.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

const MEMORY_HELP = [
  'MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'DOCTOR',
  '    Return memory problems reports.',
  'MALLOC-STATS',
  '    Return internal statistics report from the memory allocator.',
  'PURGE',
  '    Attempt to purge dirty pages for reclamation by the allocator.',
  'STATS',
  '    Return information about the memory usage of the server.',
  'USAGE <key> [SAMPLES <count>]',
  '    Return memory in bytes used by <key> and its value. Nested values are',
  '    sampled up to <count> times (default: 5, 0 means sample all).',
  'HELP',
  '    Prints this help.',
];

/**
 * MEMORY USAGE key [SAMPLES count]: the key's bytes as the keyspace counts them (its 64-byte
 * record, a long key's arena chunk, a blob's ring), null when it does not exist. SAMPLES is
 * checked as Redis does and otherwise ignored: a key's cost is known exactly.
 */
function memoryUsage(ctx: CommandContext, argv: CommandArgs): void {
  for (let i = 3; i < argv.length; i++) {
    if (argv.lower(i) === 'samples' && i + 1 < argv.length) {
      const n = argv.redisInteger(++i);
      if (n === null) {
        ctx.reply.error('ERR value is not an integer or out of range');
        return;
      }
      if (n < 0) {
        ctx.reply.error('ERR syntax error');
        return;
      }
    } else {
      ctx.reply.error('ERR syntax error');
      return;
    }
  }
  const ks = ctx.server.keyspace;
  const slot = lookupKeyArg(ks, argv, 2, ctx.nowMs);
  if (slot === -1) ctx.reply.nullBulk();
  else ctx.reply.integer(ks.keyBytes(slot));
}

/** MEMORY STATS: Redis's field names (a map in RESP3, flat pairs in RESP2) with this server's counts. */
function memoryStats(ctx: CommandContext): void {
  const s = ctx.server;
  const r = ctx.reply;
  const m = processMemory();
  // INFO used_memory: the figure maxmemory is compared with (src/server/memory.ts).
  const used = s.memory.countedBytes;
  const startup = s.memory.startupBytes;
  const dataset = s.keyspace.datasetBytes;
  const keys = s.keyspace.size;
  let clientBytes = 0;
  for (const c of s.clients.values()) clientBytes += c.parser.pendingBytes + c.outputBytes;
  const overhead = startup + clientBytes;
  const ints: [string, number][] = [
    ['peak.allocated', used], ['total.allocated', used], ['startup.allocated', startup],
    ['replication.backlog', 0], ['clients.slaves', 0], ['clients.normal', clientBytes], ['cluster.links', 0],
    ['aof.buffer', 0], ['lua.caches', 0], ['functions.caches', 0],
  ];
  r.mapHeader(ints.length + 8);
  for (const [k, v] of ints) {
    r.bulk(k);
    r.integer(v);
  }
  r.bulk('db.0');
  r.mapHeader(2);
  r.bulk('overhead.hashtable.main');
  r.integer(0);
  r.bulk('overhead.hashtable.expires');
  r.integer(0);
  r.bulk('overhead.total');
  r.integer(overhead);
  r.bulk('keys.count');
  r.integer(keys);
  r.bulk('keys.bytes-per-key');
  r.integer(keys === 0 ? 0 : Math.floor(dataset / keys));
  r.bulk('dataset.bytes');
  r.integer(dataset);
  r.bulk('dataset.percentage');
  r.double(used > startup ? (dataset * 100) / (used - startup) : 0);
  r.bulk('peak.percentage');
  r.double(100);
  r.bulk('fragmentation');
  r.double(used > 0 ? m.rss / used : 0);
}

/** MEMORY DOCTOR: one sentence (a bulk in RESP2, verbatim text in RESP3, as Redis). */
function memoryDoctor(ctx: CommandContext): void {
  const s = ctx.server;
  const maxmemory = s.config.int('maxmemory');
  const counted = s.memory.countedBytes;
  let text: string;
  if (maxmemory > 0 && counted > maxmemory * 0.9) {
    text = `Sam, the keys and the server's start-up memory count ${counted} bytes, over 90% of maxmemory (${maxmemory}): ` +
      `expect evictions or OOM errors (maxmemory-policy ${s.config.get('maxmemory-policy')}).\n`;
  } else {
    text = `Sam, I see no memory problem: ${s.keyspace.size} keys count ${s.keyspace.datasetBytes} bytes` +
      (maxmemory > 0 ? ` of a ${maxmemory}-byte maxmemory.\n` : ' and no maxmemory is set.\n');
  }
  ctx.reply.verbatim(text);
}

const sub = (name: string, arity: number, summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = [], flags: CommandSpec['flags'] = []): CommandSpec => ({
  name, arity, flags, ...noKeys(), group: 'server', since: '4.0.0', summary, args, run,
});

export const memoryCommands: CommandSpec[] = [
  { name: 'memory', arity: -2, flags: [], ...noKeys(), group: 'server', since: '4.0.0', summary: 'A container for memory diagnostics commands.', args: [],
    subcommands: [
      { ...sub('usage', -3, 'Estimates the memory usage of a key.', memoryUsage, [
        { name: 'key', type: 'key' }, { name: 'count', type: 'integer', token: 'SAMPLES', optional: true }], ['readonly']),
      firstKey: 2, lastKey: 2, keyStep: 1, complexity: 'O(1)' },
      sub('stats', 2, 'Returns details about memory usage.', memoryStats),
      sub('doctor', 2, 'Outputs a memory problems report.', memoryDoctor),
      sub('malloc-stats', 2, 'Returns the allocator statistics.', (ctx) => ctx.reply.bulk('Stats not supported for the current allocator')),
      sub('purge', 2, 'Asks the allocator to release memory.', (ctx) => ctx.reply.ok()),
      sub('help', 2, 'Returns helpful text about the different subcommands.', (ctx) => replyHelp(ctx, MEMORY_HELP), [], ['loading', 'stale']),
    ] },
];
