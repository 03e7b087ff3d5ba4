/**
 * The reply of every container's HELP subcommand (CLIENT, CONFIG, ACL, COMMAND, MEMORY, SLOWLOG, ...),
 * in a module of its own so that each command family uses it without importing another family.
 */
import type { CommandContext } from './types.js';

/** Replies with help lines as Redis does: an array of status strings. */
export function replyHelp(ctx: CommandContext, lines: string[]): void {
  ctx.reply.arrayHeader(lines.length);
  for (const line of lines) ctx.reply.status(line);
}
