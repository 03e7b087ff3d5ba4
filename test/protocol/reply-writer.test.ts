/**
 * The reply writer's encodings, byte for byte, in RESP2 and RESP3.
 */
import { describe, expect, it } from 'vitest';
import { ReplyWriter } from '../../src/protocol/reply-writer.js';

function written(proto: 2 | 3, write: (w: ReplyWriter) => void): string {
  const w = new ReplyWriter();
  w.proto = proto;
  write(w);
  return w.take().toString('latin1');
}

describe('ReplyWriter', () => {
  it('writes integers as Redis does, i64 limits clamped, −0 as 0', () => {
    const values = [0, 1, 9, 10, -1, -10, 12345, -0, 999999999999999, -999999999999999, 1e15, 2 ** 53, Number.MAX_VALUE, -Number.MAX_VALUE];
    expect(written(2, (w) => values.forEach((n) => w.integer(n)))).toBe(
      [':0', ':1', ':9', ':10', ':-1', ':-10', ':12345', ':0', ':999999999999999', ':-999999999999999', ':1000000000000000',
        ':9007199254740992', ':9223372036854775807', ':-9223372036854775808'].map((l) => l + '\r\n').join(''));
  });

  it('degrades RESP3 types for RESP2 clients as Redis does', () => {
    const both = (w: ReplyWriter) => {
      w.mapHeader(1);
      w.bulk('k');
      w.nullBulk();
      w.double(1.5);
      w.boolean(true);
      w.setHeader(0);
      w.verbatim('hi');
    };
    expect(written(3, both)).toBe('%1\r\n$1\r\nk\r\n_\r\n,1.5\r\n#t\r\n~0\r\n=6\r\ntxt:hi\r\n');
    expect(written(2, both)).toBe('*2\r\n$1\r\nk\r\n$-1\r\n$3\r\n1.5\r\n:1\r\n*0\r\n$2\r\nhi\r\n');
  });

  it('keeps error replies on one line and bulk strings binary', () => {
    expect(written(2, (w) => w.error('ERR bad\r\ninput'))).toBe('-ERR bad  input\r\n');
    expect(written(2, (w) => w.bulk(Buffer.from([0, 255, 13, 10])))).toBe('$4\r\n\x00\xff\r\n\r\n');
  });

  it('records where an error reply begins, forgotten once truncated, taken or discarded', () => {
    const w = new ReplyWriter();
    w.status('OK');
    expect(w.errorAt).toBe(-1);
    const mark = w.length;
    w.error('ERR first');
    expect(w.errorAt).toBe(mark);
    w.truncate(mark);
    expect(w.errorAt).toBe(-1);
    w.arrayHeader(2);
    w.error('ERR inside an array');
    expect(w.errorAt).toBe(mark + 4); // after `*2\r\n`: the array is not the error
    w.take();
    expect(w.errorAt).toBe(-1);
    w.error('ERR x');
    w.discard();
    expect(w.errorAt).toBe(-1);
  });
});
