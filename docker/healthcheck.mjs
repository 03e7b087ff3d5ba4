/**
 * The container's HEALTHCHECK: PING cellgate over RESP on loopback, with node alone (the image has no
 * redis-cli, curl or nc). Healthy (exit 0) when the server answers PING with +PONG, or answers at all
 * with -NOAUTH / -WRONGPASS (alive, but its password is not the one in CELLGATE_REQUIREPASS, e.g. it was
 * set in a config file or changed with CONFIG SET). Unhealthy (exit 1) on no connection, no answer
 * within 2 s, or any other reply (such as -LOADING while a snapshot is read).
 *
 * Port: CELLGATE_PORT, else 6379. Password: CELLGATE_REQUIREPASS, sent with AUTH before the PING.
 */
import net from 'node:net';

const port = Number(process.env.CELLGATE_PORT || 6379);
const password = process.env.CELLGATE_REQUIREPASS || '';

const bulk = (s) => `$${Buffer.byteLength(s)}\r\n${s}\r\n`;
const request = (password ? `*2\r\n${bulk('AUTH')}${bulk(password)}` : '') + `*1\r\n${bulk('PING')}`;
const repliesExpected = password ? 2 : 1;

function done(healthy, why) {
  process.stdout.write(`${healthy ? 'healthy' : 'unhealthy'}: ${why}\n`);
  process.exit(healthy ? 0 : 1);
}

const socket = net.connect({ host: '127.0.0.1', port });
socket.setTimeout(2000, () => done(false, `no reply from 127.0.0.1:${port} within 2 s`));
socket.on('error', (e) => done(false, `127.0.0.1:${port}: ${e.message}`));
socket.on('connect', () => socket.write(request));
let text = '';
socket.on('data', (chunk) => {
  text += chunk.toString('latin1');
  const lines = text.split('\r\n');
  if (lines.length <= repliesExpected) return; // not all reply lines are complete yet
  const last = lines[repliesExpected - 1];
  if (last === '+PONG') done(true, 'PONG');
  if (/^-(NOAUTH|WRONGPASS)/.test(lines[0]) || /^-NOAUTH/.test(last)) done(true, `alive (${(/^-/.test(lines[0]) ? lines[0] : last).slice(0, 60)})`);
  done(false, JSON.stringify(lines.slice(0, repliesExpected).join(' ').slice(0, 120)));
});
