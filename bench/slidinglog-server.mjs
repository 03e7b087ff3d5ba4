#!/usr/bin/env node
/**
 * RL.SLIDINGLOG refusals and peeks on a 1,000,000-entry log, through a real server: the server's
 * own INFO commandstats usec_per_call (time inside the command, not the network).
 *  - a log of limit 1,000,000 over 1,000,000 ms is filled with one accepted call per ms (a frozen
 *    clock advanced 1 ms after each call, pipelined);
 *  - half a period later half the entries have slid out; CONFIG RESETSTAT, then 2,000 pipelined
 *    calls: 1,000 peeks (COST 0) and 1,000 refusals (COST 600000).
 *
 *   npx tsc -p tsconfig.json && node bench/slidinglog-server.mjs
 *   CELLGATE_MAIN=/path/to/other/dist/main.js node bench/slidinglog-server.mjs   (another build)
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = process.env.CELLGATE_MAIN ?? fileURLToPath(new URL('../dist/main.js', import.meta.url));
const LIMIT = 1_000_000;
const START = 1_800_000_000_000;

function mbulk(...args) {
  return Buffer.from(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`, 'latin1');
}

const dir = mkdtempSync(join(tmpdir(), 'cellgate-slog-'));
const child = spawn(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json', '--enable-debug-command', 'yes'], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((resolve, reject) => {
  let buf = '';
  child.stdout.on('data', (c) => {
    buf += c;
    const m = /ready to accept[^\n]*"port":(\d+)|"port":(\d+)[^\n]*ready to accept/.exec(buf);
    if (m) resolve(Number(m[1] ?? m[2]));
  });
  child.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
});

const socket = net.connect({ port, host: '127.0.0.1' });
await new Promise((resolve) => socket.once('connect', resolve));
let kept = [];
let tail = '';
let done = null;
socket.on('data', (chunk) => {
  kept.push(chunk);
  tail = (tail + chunk.toString('latin1')).slice(-7);
  if (tail === '+PONG\r\n' && done) {
    const d = done;
    done = null;
    d(Buffer.concat(kept).toString('latin1'));
  }
});
/** Sends the payload then PING; resolves with everything received once PONG came back. */
function send(payload) {
  kept = [];
  return new Promise((resolve) => {
    done = resolve;
    socket.write(payload);
    socket.write(mbulk('PING'));
  });
}

await send(mbulk('DEBUG', 'CLOCK', 'SET', String(START)));
const step = Buffer.concat([mbulk('RL.SLIDINGLOG', 'hist', LIMIT, LIMIT), mbulk('DEBUG', 'CLOCK', 'ADVANCE', '1')]);
const batch = Buffer.concat(Array.from({ length: 50_000 }, () => step));
const fillStart = Date.now();
for (let sent = 0; sent < LIMIT; sent += 50_000) await send(batch);
console.log(`filled in ${Date.now() - fillStart} ms: ${JSON.stringify((await send(mbulk('RL.SLIDINGLOG', 'hist', LIMIT, LIMIT, 'COST', 0))).split('\r\n').slice(0, 7))}`);
await send(Buffer.concat([mbulk('DEBUG', 'CLOCK', 'SET', String(START + LIMIT - 1 + LIMIT / 2)), mbulk('CONFIG', 'RESETSTAT')]));
const peek = mbulk('RL.SLIDINGLOG', 'hist', LIMIT, LIMIT, 'COST', 0);
const refuse = mbulk('RL.SLIDINGLOG', 'hist', LIMIT, LIMIT, 'COST', 600_000);
const callsStart = Date.now();
await send(Buffer.concat(Array.from({ length: 1000 }, () => Buffer.concat([peek, refuse]))));
const wallMs = Date.now() - callsStart;
const info = await send(mbulk('INFO', 'commandstats'));
console.log(`2000 pipelined peeks/refusals: ${wallMs} ms wall; ${/cmdstat_rl\.slidinglog:[^\r]*/.exec(info)?.[0]}`);
socket.destroy();
child.kill('SIGTERM');
await new Promise((resolve) => child.once('exit', resolve));
rmSync(dir, { recursive: true, force: true });
