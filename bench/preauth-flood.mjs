// Memory held by unauthenticated clients that send junk and never read their replies:
// `node bench/preauth-flood.mjs [clients=1000]` starts dist/main.js with a password, opens the
// clients (half inline junk, half RESP commands, 4 MiB each, never reading), waits until the server
// is done with them (all closed, or nothing changing for 2 s) and prints the server's VmRSS before
// and after, and how many of them are still connected.
import { spawn } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

const CLIENTS = Number(process.argv[2] ?? 1000);
console.log(`$ node bench/preauth-flood.mjs ${CLIENTS}`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
const SEND = 4 * 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), 'cellgate-flood-'));
const main = new URL('../dist/main.js', import.meta.url).pathname;
const proc = spawn(process.execPath, [main, '--port', '0', '--bind', '127.0.0.1', '--requirepass', 'pw', '--dir', dir, '--log-format', 'json'], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((resolve, reject) => {
  let buf = '';
  proc.stdout.on('data', (d) => {
    buf += d;
    for (const line of buf.split('\n')) {
      try {
        const e = JSON.parse(line);
        if (String(e.msg).includes('ready to accept connections')) resolve(e.port);
      } catch { /* partial line */ }
    }
  });
  proc.on('exit', () => reject(new Error('server exited')));
});
proc.stdout.resume();

const rss = () => Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${proc.pid}/status`, 'latin1'))[1]) * 1024;
const mib = (n) => `${(n / 1048576).toFixed(1)} MiB`;

function command(...args) {
  return args.reduce((s, a) => s + `$${Buffer.byteLength(a)}\r\n${a}\r\n`, `*${args.length}\r\n`);
}
const inline = Buffer.from('GET some-key-that-needs-auth\r\n'.repeat(8192), 'latin1');
const resp = Buffer.from(command('CL.THROTTLE', 'k', '5', '10', '60').repeat(2048), 'latin1');

/** One authenticated connection for CLIENT LIST. */
const admin = net.connect({ port, host: '127.0.0.1' });
await new Promise((r) => admin.once('connect', r));
let answer = '';
admin.on('data', (d) => { answer += d.toString('latin1'); });
async function call(...args) {
  answer = '';
  admin.write(command(...args));
  for (let i = 0; i < 500 && !/\r\n$/.test(answer); i++) await delay(10);
  // A bulk reply: wait for all of it.
  const m = /^\$(\d+)\r\n/.exec(answer);
  if (m) while (answer.length < m[0].length + Number(m[1]) + 2) await delay(10);
  return answer;
}
await call('AUTH', 'pw');
await call('DEBUG', 'GC');
await delay(500);
const before = rss();

let closed = 0;
const sockets = [];
for (let i = 0; i < CLIENTS; i++) {
  const s = net.connect({ port, host: '127.0.0.1' });
  s.on('error', () => {});
  s.on('close', () => closed++);
  await new Promise((r) => s.once('connect', r));
  s.pause();
  const junk = i % 2 === 0 ? inline : resp;
  for (let sent = 0; sent < SEND; sent += junk.length) s.write(junk);
  sockets.push(s);
}
let last = '';
for (let stable = 0, i = 0; stable < 40 && i < 1200; i++) {
  await delay(50);
  const list = await call('CLIENT', 'LIST');
  const rows = list.split('\n').filter((l) => /qbuf=/.test(l) && !/cmd=client/.test(l));
  const now = rows.map((l) => /qbuf=\d+/.exec(l)[0] + /omem=\d+/.exec(l)[0]).join();
  stable = rows.length === 0 || now === last ? stable + 1 : 0;
  last = now;
}
const after = rss();
const connected = (await call('CLIENT', 'LIST')).split('\n').filter((l) => /qbuf=/.test(l) && !/cmd=client/.test(l)).length;
console.log(`${CLIENTS} unauthenticated flooders: VmRSS ${mib(before)} -> ${mib(after)} (+${mib(after - before)}, ${((after - before) / CLIENTS / 1024).toFixed(1)} KiB per client); ${connected} still connected, ${closed} closed`);
for (const s of sockets) s.destroy();
admin.destroy();
proc.kill('SIGTERM');
await new Promise((r) => proc.once('exit', r));
rmSync(dir, { recursive: true, force: true });
