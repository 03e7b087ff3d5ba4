/**
 * One script call written as its RESP bytes: `EVALSHA <sha> 0 <element>...` (or `EVAL <script> 0
 * ...` when the backend does not have the script yet), built in one buffer from the elements'
 * bytes, and handed to ioredis as a command that writes exactly those bytes. A batch of limiter
 * calls (src/backend/limiter-batches.ts) is one of these: one Command, one promise and one write
 * for all its calls, where building each call as its own ioredis command costs an object, a
 * promise and an argument conversion per call.
 */
import { createHash } from 'node:crypto';
import { Command } from 'ioredis';

/** A script's two heads: by SHA1 (the usual) and by its text (after NOSCRIPT). */
export class ScriptHeads {
  readonly sha: string;
  private readonly byShaHead: Buffer;
  private readonly byTextHead: Buffer;

  constructor(script: string) {
    this.sha = createHash('sha1').update(script).digest('hex');
    this.byShaHead = Buffer.from(`$7\r\nEVALSHA\r\n$40\r\n${this.sha}\r\n$1\r\n0\r\n`);
    const text = Buffer.from(script);
    this.byTextHead = Buffer.concat([Buffer.from(`$4\r\nEVAL\r\n$${text.length}\r\n`), text, Buffer.from('\r\n$1\r\n0\r\n')]);
  }

  /** The whole command: the script (by SHA1, or by text) with no keys and these ARGV elements. */
  frame(elements: readonly Buffer[], byText: boolean): Buffer {
    const head = byText ? this.byTextHead : this.byShaHead;
    const count = `*${elements.length + 3}\r\n`;
    let size = count.length + head.length;
    for (const e of elements) size += e.length + decimalDigits(e.length) + 5;
    const out = Buffer.allocUnsafe(size);
    let at = out.write(count, 0, 'latin1');
    at += head.copy(out, at);
    for (const e of elements) {
      out[at++] = 0x24; // '$'
      at += out.write(String(e.length), at, 'latin1');
      out[at++] = 0x0d;
      out[at++] = 0x0a;
      at += e.copy(out, at);
      out[at++] = 0x0d;
      out[at++] = 0x0a;
    }
    return out;
  }
}

function decimalDigits(n: number): number {
  let d = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    d++;
  }
  return d;
}

/**
 * An ioredis command whose bytes are already written: ioredis queues it for its reply and parses
 * the reply (Buffers for bulk strings) as for any command.
 */
export class FrameCommand extends Command {
  constructor(private readonly frame: Buffer) {
    super('evalsha', [], { replyEncoding: null });
  }

  override toWritable(): Buffer {
    return this.frame;
  }
}
