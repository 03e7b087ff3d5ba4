/**
 * Watches files and directories by their names, not by the inodes they had when the watch began:
 * the way operators replace configuration and certificates must all be seen —
 *  - a file written in place, or replaced by a rename (an editor's save, `mv new.yaml x.yaml`);
 *  - a symlink swapped to another target (`ln -s v2 new && mv -Tf new current`, the layout
 *    envoyproxy/ratelimit's runtime watches);
 *  - Kubernetes' atomic update of a mounted ConfigMap or Secret (`tls.crt -> ..data/tls.crt`, then
 *    `..data` renamed onto a new timestamped directory);
 *  - a directory deleted and created again.
 *
 * A watch on an inode (fs.watch of the path alone) misses all but the first. So each name is
 * watched through the directories that hold it (the name's own and its target's), plus the
 * directory itself when it is one, and a change is decided by comparing fingerprints: the resolved
 * path and the identity, size and times of each file (and of a directory's entries). Events only
 * say "look again"; a periodic look (`pollMs`) covers what inotify cannot report (a watched
 * directory that was itself replaced, a watch that could not be made). The looks run off the event
 * loop (fs/promises) and never overlap.
 */
import { watch, type FSWatcher } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';

export interface PathWatchOptions {
  /** Quiet time after an event before looking (a ConfigMap update or an editor writes in steps). */
  debounceMs: number;
  /** A look every this many ms even without an event; 0: only on events. */
  pollMs: number;
  /** Entries of a watched directory taken into its fingerprint (beyond: their count only). */
  maxDirEntries?: number;
  /** A watch that could not be made or failed (the polling goes on); for the log. */
  onWarning?: (message: string) => void;
}

const DEFAULT_MAX_DIR_ENTRIES = 4096;

/** Identity and state of one path, as text: equal texts mean nothing an operator did changed. */
async function fingerprint(path: string, maxEntries: number): Promise<{ text: string; real: string | null; isDir: boolean }> {
  let real: string;
  try {
    real = await realpath(path);
  } catch (e) {
    return { text: `${path}:missing:${(e as NodeJS.ErrnoException).code ?? 'EIO'}`, real: null, isDir: false };
  }
  let st;
  try {
    st = await stat(real);
  } catch (e) {
    return { text: `${path}->${real}:stat:${(e as NodeJS.ErrnoException).code ?? 'EIO'}`, real, isDir: false };
  }
  const self = `${path}->${real}:${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  if (!st.isDirectory()) return { text: self, real, isDir: false };
  let names: string[];
  try {
    names = (await readdir(real)).sort();
  } catch (e) {
    return { text: `${self}:readdir:${(e as NodeJS.ErrnoException).code ?? 'EIO'}`, real, isDir: true };
  }
  const parts = [self, `entries:${names.length}`];
  for (const name of names.slice(0, maxEntries)) {
    try {
      // stat follows each entry's link: a ConfigMap's `x.yaml -> ..data/x.yaml` changes with ..data.
      const e = await stat(join(real, name));
      parts.push(`${name}:${e.dev}:${e.ino}:${e.size}:${e.mtimeMs}:${e.ctimeMs}`);
    } catch (err) {
      parts.push(`${name}:${(err as NodeJS.ErrnoException).code ?? 'EIO'}`);
    }
  }
  return { text: parts.join('\n'), real, isDir: true };
}

export class PathWatcher {
  private readonly watchers = new Map<string, FSWatcher>();
  private last = '';
  private debounce: NodeJS.Timeout | null = null;
  private poll: NodeJS.Timeout | null = null;
  private looking = false;
  private lookAgain = false;
  private closed = false;
  private readonly maxEntries: number;

  constructor(
    private readonly paths: readonly string[],
    /** Called after a look found a change (never twice at once; its errors are the caller's). */
    private readonly onChange: () => void,
    private readonly options: PathWatchOptions,
  ) {
    this.maxEntries = options.maxDirEntries ?? DEFAULT_MAX_DIR_ENTRIES;
  }

  /** Takes the first fingerprint and arms the watches; a change is reported from then on. */
  async start(): Promise<void> {
    const looked = await this.fingerprints();
    this.last = looked.text;
    this.arm(looked.dirs);
    if (this.options.pollMs > 0) {
      this.poll = setInterval(() => this.look(), this.options.pollMs);
      this.poll.unref();
    }
  }

  close(): void {
    this.closed = true;
    if (this.debounce !== null) clearTimeout(this.debounce);
    if (this.poll !== null) clearInterval(this.poll);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  /** Looks now (SIGHUP, CONFIG SET): the change callback runs if anything changed. */
  check(): void {
    this.look();
  }

  private async fingerprints(): Promise<{ text: string; dirs: Set<string> }> {
    const texts: string[] = [];
    const dirs = new Set<string>();
    for (const path of this.paths) {
      const f = await fingerprint(path, this.maxEntries);
      texts.push(f.text);
      dirs.add(dirname(path));
      if (f.real !== null) dirs.add(f.isDir ? f.real : dirname(f.real));
      if (f.isDir) dirs.add(path);
    }
    return { text: texts.join('\n\n'), dirs };
  }

  /** Watches exactly `dirs`: new ones armed, gone ones closed (a swapped target moves the watch). */
  private arm(dirs: Set<string>): void {
    for (const [dir, w] of this.watchers) {
      if (!dirs.has(dir)) {
        w.close();
        this.watchers.delete(dir);
      }
    }
    for (const dir of dirs) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = watch(dir, { persistent: false }, () => this.soon());
        w.on('error', (e) => {
          w.close();
          this.watchers.delete(dir);
          this.options.onWarning?.(`watching ${dir} failed (${e.message}); looking every ${this.options.pollMs} ms instead`);
        });
        this.watchers.set(dir, w);
      } catch (e) {
        // A directory that does not exist yet is normal (it may be created later): the poll sees it.
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && code !== 'ENOTDIR') this.options.onWarning?.(`cannot watch ${dir} (${code ?? (e as Error).message})`);
      }
    }
  }

  private soon(): void {
    if (this.closed) return;
    if (this.debounce !== null) clearTimeout(this.debounce);
    this.debounce = setTimeout(() => {
      this.debounce = null;
      this.look();
    }, this.options.debounceMs);
    this.debounce.unref();
  }

  private look(): void {
    if (this.closed) return;
    if (this.looking) {
      this.lookAgain = true;
      return;
    }
    this.looking = true;
    this.fingerprints().then(
      (looked) => {
        this.looking = false;
        if (this.closed) return;
        this.arm(looked.dirs);
        const changed = looked.text !== this.last;
        this.last = looked.text;
        if (changed) {
          try {
            this.onChange();
          } catch (e) {
            this.options.onWarning?.(`the change of ${this.paths.join(', ')} could not be handled: ${(e as Error).message}`);
          }
        }
        if (this.lookAgain) {
          this.lookAgain = false;
          this.look();
        }
      },
      (e: unknown) => {
        this.looking = false;
        this.lookAgain = false;
        this.options.onWarning?.(`looking at ${this.paths.join(', ')} failed: ${(e as Error).message}`);
      },
    );
  }
}
