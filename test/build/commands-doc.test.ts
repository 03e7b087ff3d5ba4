/**
 * docs/commands.md's command index is generated from the command table (scripts/commands-doc.mjs,
 * `npm run docs:commands`): this fails when the document and the table disagree, so a command
 * added, renamed or reflagged without regenerating the index is caught.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { allCommands } from '../../src/commands/table.js';
import type { CommandSpec } from '../../src/commands/types.js';

interface CommandsDoc {
  BEGIN: string;
  END: string;
  renderCommandIndex(commands: CommandSpec[]): string;
  withCommandIndex(doc: string, index: string): string;
}

const SCRIPT = new URL('../../scripts/commands-doc.mjs', import.meta.url).href;
const DOC = join(import.meta.dirname, '../../docs/commands.md');

describe('docs/commands.md command index', () => {
  it('is what the command table generates (run npm run docs:commands after changing the table)', async () => {
    const gen = (await import(SCRIPT)) as CommandsDoc;
    const doc = readFileSync(DOC, 'utf8');
    expect(doc.split(gen.BEGIN).length).toBe(2);
    expect(gen.withCommandIndex(doc, gen.renderCommandIndex(allCommands()))).toBe(doc);
  });

  it('lists every command and subcommand once, and changes when the table does', async () => {
    const gen = (await import(SCRIPT)) as CommandsDoc;
    const index = gen.renderCommandIndex(allCommands());
    const rows = index.split('\n').filter((l) => l.startsWith('| `'));
    const expected = allCommands().flatMap((c) => (c.subcommands === undefined ? [c] : c.subcommands));
    expect(rows.length).toBe(expected.length);
    expect(index).toContain('| `PING [message]` | 1..2 | fast, health-check |');
    const changed = allCommands().map((c) => (c.name === 'ping' ? { ...c, summary: 'Something else.' } : c));
    expect(gen.renderCommandIndex(changed)).not.toBe(index);
  });
});
