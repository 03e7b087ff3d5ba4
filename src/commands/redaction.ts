/**
 * A command's secret arguments, from the table's declarative `redacts` (types.ts Redaction) to the
 * test the slow log runs on each argument of an entry it writes. Redis decides this in each
 * command's code (redactClientCommandArgument calls); here one rule per command says it, and the
 * table compiles it once.
 */
import { isSensitiveConfig } from '../config.js';
import type { CommandArgs } from '../protocol/command-args.js';
import type { Redaction } from './types.js';

export type SecretTest = (argv: CommandArgs, i: number) => boolean;

export function compileRedaction(rule: Redaction): SecretTest {
  if ('from' in rule) {
    const first = rule.from;
    return (_argv, i) => i >= first;
  }
  if ('sensitiveConfigValuesFrom' in rule) {
    // Name/value pairs: a value is at an odd distance from the first name.
    const first = rule.sensitiveConfigValuesFrom;
    return (argv, i) => i > first && (i - first) % 2 === 1 && isSensitiveConfig(argv.lower(i - 1));
  }
  // An option list, walked as the command parses it: a Map, so no option name can reach
  // Object.prototype (`constructor`, `__proto__`).
  const { first, secret } = rule;
  const takes = new Map(Object.entries(rule.options));
  return (argv, i) => {
    for (let j = first; j < i; j++) {
      const option = argv.lower(j);
      const n = takes.get(option);
      if (n === undefined || argv.length - j - 1 < n) return false;
      if (option === secret && i <= j + n) return true;
      j += n;
    }
    return false;
  };
}
