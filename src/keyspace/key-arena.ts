/**
 * Where the keyspace keeps key bytes: no JavaScript string and no Buffer object per key.
 *
 * Keys up to 4 KiB go into size classes (multiples of 8 bytes up to 64, then four classes per
 * doubling, so at most ~25% of a chunk is unused beyond 64 bytes); each class is one growing byte
 * array of equal chunks plus a stack of freed chunks, so a key costs its rounded-up length and
 * nothing else, and the GC never sees it. A key is found by (length, ref): the length picks the
 * class, the ref is the chunk number in it. Longer keys (rare: limiter keys are ids and routes) each
 * get their own Uint8Array.
 */

const MAX_CHUNK = 4096;
/** Chunk sizes, smallest first. */
const CLASS_SIZES: number[] = [];
for (let s = 8; s <= 64; s += 8) CLASS_SIZES.push(s);
for (let base = 64; base < MAX_CHUNK; base *= 2) for (let q = 1; q <= 4; q++) CLASS_SIZES.push(base + (base / 4) * q);
/** Class index for every length 0..MAX_CHUNK. */
const CLASS_OF_LENGTH = new Uint8Array(MAX_CHUNK + 1);
for (let len = 0, c = 0; len <= MAX_CHUNK; len++) {
  while (CLASS_SIZES[c] < len) c++;
  CLASS_OF_LENGTH[len] = c;
}

class ChunkClass {
  data: Buffer;
  /** Chunks ever handed out: [0, used). */
  used = 0;
  free: number[] = [];
  constructor(readonly size: number) {
    this.data = Buffer.alloc(size * 64);
  }
  alloc(): number {
    const freed = this.free.pop();
    if (freed !== undefined) return freed;
    if ((this.used + 1) * this.size > this.data.length) {
      const bigger = Buffer.alloc(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    return this.used++;
  }
}

export class KeyArena {
  private classes = CLASS_SIZES.map((size) => new ChunkClass(size));
  private big = new Map<number, Buffer>();
  private nextBig = 0;
  /**
   * Bytes of the chunks (and big keys) holding live keys: what maxmemory counts for them. The class
   * arrays' unused room (they double, and freed chunks stay for reuse) is not in it, as an allocator's
   * free space is not in Redis's used_memory.
   */
  bytes = 0;

  /** The bytes a stored key of `len` bytes counts in `bytes` (its chunk, or itself when big). */
  static costOf(len: number): number {
    return len > MAX_CHUNK ? len : CLASS_SIZES[CLASS_OF_LENGTH[len]];
  }

  /** Copies `src[start, end)` in and returns its ref (the length is the caller's to keep). */
  store(src: Uint8Array, start: number, end: number): number {
    const len = end - start;
    if (len > MAX_CHUNK) {
      const ref = this.nextBig++;
      this.big.set(ref, Buffer.from(src.subarray(start, end)));
      this.bytes += len;
      return ref;
    }
    const cls = this.classes[CLASS_OF_LENGTH[len]];
    const ref = cls.alloc();
    this.bytes += cls.size;
    const data = cls.data;
    const at = ref * cls.size;
    for (let i = 0; i < len; i++) data[at + i] = src[start + i];
    return ref;
  }

  release(ref: number, len: number): void {
    if (len > MAX_CHUNK) {
      this.big.delete(ref);
      this.bytes -= len;
    } else {
      const cls = this.classes[CLASS_OF_LENGTH[len]];
      cls.free.push(ref);
      this.bytes -= cls.size;
    }
  }

  /** Whether the stored key (ref, len) has the bytes `src[start, start + len)`. */
  equals(ref: number, len: number, src: Uint8Array, start: number): boolean {
    let data: Buffer;
    let at: number;
    if (len > MAX_CHUNK) {
      data = this.big.get(ref)!;
      at = 0;
    } else {
      const cls = this.classes[CLASS_OF_LENGTH[len]];
      data = cls.data;
      at = ref * cls.size;
    }
    for (let i = 0; i < len; i++) if (data[at + i] !== src[start + i]) return false;
    return true;
  }

  /** The stored key as a binary string (one char per byte), as the rest of the server names keys. */
  toString(ref: number, len: number): string {
    if (len > MAX_CHUNK) return this.big.get(ref)!.toString('latin1');
    const cls = this.classes[CLASS_OF_LENGTH[len]];
    const at = ref * cls.size;
    return cls.data.toString('latin1', at, at + len);
  }

  /** Copies the stored key into `target` at `offset`; returns its length. */
  copy(ref: number, len: number, target: Buffer, offset: number): number {
    if (len > MAX_CHUNK) return this.big.get(ref)!.copy(target, offset);
    const cls = this.classes[CLASS_OF_LENGTH[len]];
    const at = ref * cls.size;
    return cls.data.copy(target, offset, at, at + len);
  }
}
