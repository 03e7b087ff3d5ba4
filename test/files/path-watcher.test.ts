/**
 * Watching by name (src/files/path-watcher.ts): every way an operator replaces a configuration
 * directory or a certificate is seen — in-place writes, renames, a symlink swapped with `mv -Tf`,
 * Kubernetes' `..data` swap, a directory deleted and created again — and nothing is reported when
 * nothing changed. Real files, real inotify; the waits are for events, never for a duration.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { PathWatcher } from '../../src/files/path-watcher.js';
import { waitFor } from '../helpers/wait.js';

const root = mkdtempSync(join(tmpdir(), 'cellgate-watch-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const open: PathWatcher[] = [];
afterEach(() => {
  for (const w of open.splice(0)) w.close();
});

let serial = 0;
function fresh(): string {
  const d = join(root, `case${++serial}`);
  mkdirSync(d);
  return d;
}

/** A watcher that counts its change reports; polling off unless asked, so events alone are tested. */
async function watching(paths: string[], pollMs = 0): Promise<{ changes: () => number; watcher: PathWatcher }> {
  let n = 0;
  const watcher = new PathWatcher(paths, () => n++, { debounceMs: 20, pollMs });
  open.push(watcher);
  await watcher.start();
  return { changes: () => n, watcher };
}

describe('PathWatcher', () => {
  it('sees a file written in place and a file replaced by a rename in a watched directory', async () => {
    const d = fresh();
    writeFileSync(join(d, 'a.yaml'), 'one');
    const w = await watching([d]);
    writeFileSync(join(d, 'a.yaml'), 'two!');
    await waitFor(() => w.changes() >= 1, 'in-place write seen');
    const before = w.changes();
    writeFileSync(join(d, '.tmp'), 'three');
    renameSync(join(d, '.tmp'), join(d, 'a.yaml'));
    await waitFor(() => w.changes() > before, 'rename seen');
  });

  it('sees a directory symlink swapped with mv -Tf, and then changes inside the new target', async () => {
    const d = fresh();
    mkdirSync(join(d, 'v1'));
    mkdirSync(join(d, 'v2'));
    writeFileSync(join(d, 'v1', 'x.yaml'), 'v1');
    writeFileSync(join(d, 'v2', 'x.yaml'), 'v2');
    symlinkSync('v1', join(d, 'current'));
    const w = await watching([join(d, 'current')]);
    symlinkSync('v2', join(d, 'new'));
    execFileSync('mv', ['-Tf', join(d, 'new'), join(d, 'current')]);
    await waitFor(() => w.changes() >= 1, 'symlink swap seen');
    const before = w.changes();
    writeFileSync(join(d, 'v2', 'y.yaml'), 'new file in the new target');
    await waitFor(() => w.changes() > before, 'a file added to the new target seen');
  });

  it("sees Kubernetes' ..data swap of a mounted Secret through the file's own path", async () => {
    const d = fresh();
    mkdirSync(join(d, '..2026_01'));
    writeFileSync(join(d, '..2026_01', 'tls.crt'), 'old');
    symlinkSync('..2026_01', join(d, '..data'));
    symlinkSync('..data/tls.crt', join(d, 'tls.crt'));
    const w = await watching([join(d, 'tls.crt')]);
    mkdirSync(join(d, '..2026_02'));
    writeFileSync(join(d, '..2026_02', 'tls.crt'), 'new');
    symlinkSync('..2026_02', join(d, '..data_tmp'));
    renameSync(join(d, '..data_tmp'), join(d, '..data'));
    rmSync(join(d, '..2026_01'), { recursive: true });
    await waitFor(() => w.changes() >= 1, '..data swap seen');
  });

  it('sees a watched directory deleted and created again, then writes in the new one', async () => {
    const d = fresh();
    const conf = join(d, 'conf');
    mkdirSync(conf);
    writeFileSync(join(conf, 'a.yaml'), 'a');
    const w = await watching([conf]);
    rmSync(conf, { recursive: true });
    await waitFor(() => w.changes() >= 1, 'deletion seen');
    const before = w.changes();
    mkdirSync(conf);
    writeFileSync(join(conf, 'a.yaml'), 'b');
    await waitFor(() => w.changes() > before, 're-creation seen');
    const after = w.changes();
    writeFileSync(join(conf, 'a.yaml'), 'c, written in the re-created directory');
    await waitFor(() => w.changes() > after, 'a write in the re-created directory seen');
  });

  it('reports nothing when nothing changed: a look on request and polls find the same fingerprint', async () => {
    const d = fresh();
    writeFileSync(join(d, 'a.yaml'), 'same');
    const w = await watching([d], 10);
    // An unrelated directory's changes are not ours.
    const other = fresh();
    writeFileSync(join(other, 'b.yaml'), 'elsewhere');
    // Absence cannot be awaited: give the 10 ms poll room for a few dozen looks (fewer on a busy
    // machine, which can only make this pass for the wrong reason, never fail for one).
    await new Promise((r) => setTimeout(r, 300));
    w.watcher.check();
    expect(w.changes()).toBe(0);
  });

  it('finds a change by polling alone when no event can be watched (a path that appears later)', async () => {
    const d = fresh();
    const later = join(d, 'later', 'conf');
    const w = await watching([later], 25);
    mkdirSync(later, { recursive: true });
    await waitFor(() => w.changes() >= 1, 'creation seen by polling');
  });
});
