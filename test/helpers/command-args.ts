/** A CommandArgs holding `values` (latin1), as the request parser would hand them to a command. */
import { CommandArgs } from '../../src/protocol/command-args.js';

export function commandArgs(...values: string[]): CommandArgs {
  const a = new CommandArgs();
  for (const v of values) {
    const b = Buffer.from(v, 'latin1');
    a.push(b, 0, b.length);
  }
  return a;
}
