/**
 * The backend's Lua scripts are assembled from .lua files (src/backend/limiter-script.lua, the
 * dispatcher, and each algorithm's src/limiters/*.lua), embedded into TypeScript modules by
 * scripts/embed-lua.mjs. What Redis receives must be byte for byte the script every earlier build sent
 * (the backend tests' differential and exactness runs were made against it), and the embedded modules
 * must be the .lua files' text.
 */
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LIMITER_SCRIPT, TYPE_SCRIPT } from '../../src/backend/limiter-script.js';
import { luaSections } from '../../src/limiters/algorithm.js';
import { ALGORITHMS, SCRIPT_OPS } from '../../src/limiters/registry.js';

const EMBED = join(import.meta.dirname, '../../scripts/embed-lua.mjs');

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

describe('the Lua scripts', () => {
  it('are byte for byte the scripts of the single-string builds (SHA1 taken before the split, then with the transaction unit)', () => {
    // 64bd0fd4... (29535 characters) before the split; the dispatcher's transaction unit (flag 4:
    // the one-call body wrapped in a function, run per call of a MULTI/EXEC) made it d41bc38e...
    // (30366); the block (RL.BLOCK: load's -2, its refusal in the one-call and RL.ALL paths)
    // f1278caf... (31583); batches (flag 8: a turn's calls, keys in ARGV, one packed reply)
    // b5fe10f5... (36760); a batch's absent-key decision once per distinct element, the division
    // helpers defined once per run, 3a486e09... (37815); a batch reading first once its SET NX
    // mostly find their keys there, 37b0d9ae... (38365); a batch not reading back what it wrote,
    // 14beb34f... (39681); concurrency leases in a batch (lease-script.lua), 7b19eb4d... (45933);
    // with COST n FORCE (a negated cost: debt in every algorithm), ee1c898f... (49408); a batch's
    // lease grants sharing their value's header, PXAT and reply, releases compared in place, this.
    expect(sha1(LIMITER_SCRIPT)).toBe('d8661aa20cbe84baaefe528cef977ba076cd6d28');
    expect(LIMITER_SCRIPT.length).toBe(50584);
    // 2f579ee0... before the block's type; its names are now written by tag; c5c873a5... before the
    // concurrency type (a lease value is longer than the header).
    expect(sha1(TYPE_SCRIPT)).toBe('06b8fa6142629b5db2458802c34115f3494c1533');
  });

  it('every op has its own code, and every op the dispatcher names has a decide branch', () => {
    const ops = SCRIPT_OPS.map((o) => o.op);
    expect(new Set(ops).size).toBe(ops.length);
    expect(new Set(ALGORITHMS.map((a) => a.type)).size).toBe(ALGORITHMS.length);
    // Each algorithm's op appears in the script as a decide or refund condition (its own or shared).
    for (const a of ALGORITHMS) expect(LIMITER_SCRIPT).toContain(`op == '${a.op}'`);
    expect(LIMITER_SCRIPT).not.toContain('--@');
    expect(LIMITER_SCRIPT).not.toContain('${');
  });

  it('luaSections splits a file at its --@decide and --@refund lines, which are not kept', () => {
    expect(luaSections('--@decide\n  a\n  b\n--@refund\n  c\n')).toEqual({ luaDecide: '  a\n  b\n', luaRefund: '  c\n' });
    expect(luaSections('--@refund\n  c\n')).toEqual({ luaDecide: '', luaRefund: '  c\n' });
    expect(() => luaSections('  a\n--@decide\n')).toThrow(/must start/);
  });

  it('the embedded modules are the .lua files\' text (embed-lua --check), and --check catches a stale one', () => {
    const real = spawnSync(process.execPath, [EMBED, '--check'], { encoding: 'utf8' });
    expect(real.stderr).toBe('');
    expect(real.status).toBe(0);

    const dir = mkdtempSync(join(tmpdir(), 'cellgate-lua-'));
    try {
      writeFileSync(join(dir, 'x.lua'), "return 'new'\n");
      writeFileSync(join(dir, 'x.lua.ts'), 'export const lua: string = "return \'old\'\\n";\n');
      const stale = spawnSync(process.execPath, [EMBED, '--check', dir], { encoding: 'utf8' });
      expect(stale.status).toBe(1);
      expect(stale.stderr).toContain('x.lua.ts');
      // Without --check it rewrites the module; then the check passes.
      expect(spawnSync(process.execPath, [EMBED, dir]).status).toBe(0);
      expect(spawnSync(process.execPath, [EMBED, '--check', dir]).status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
