/**
 * HPACK (RFC 7541), the decoding half and the tables, for the h2c prototype (bench/h2proto/server.mjs).
 * The client under test is grpc-js on node:http2 (nghttp2), whose encoder uses the dynamic table and
 * Huffman-codes every string it can shorten, so both are real here: the static table, a dynamic table
 * with eviction and size updates, Huffman with its padding rules. The encoder side is not needed: the
 * prototype answers with fixed blocks made of static-table indexes and literals never indexed.
 */

// RFC 7541 Appendix B: symbol i's code (hex) / its length in bits, for symbols 0..256 (EOS).
const HUFFMAN_CODES = (
  '1ff8/13 7fffd8/23 fffffe2/28 fffffe3/28 fffffe4/28 fffffe5/28 fffffe6/28 fffffe7/28 fffffe8/28 ffffea/24 3ffffffc/30 fffffe9/28 ' +
  'fffffea/28 3ffffffd/30 fffffeb/28 fffffec/28 fffffed/28 fffffee/28 fffffef/28 ffffff0/28 ffffff1/28 ffffff2/28 3ffffffe/30 ffffff3/28 ' +
  'ffffff4/28 ffffff5/28 ffffff6/28 ffffff7/28 ffffff8/28 ffffff9/28 ffffffa/28 ffffffb/28 14/6 3f8/10 3f9/10 ffa/12 ' +
  '1ff9/13 15/6 f8/8 7fa/11 3fa/10 3fb/10 f9/8 7fb/11 fa/8 16/6 17/6 18/6 ' +
  '0/5 1/5 2/5 19/6 1a/6 1b/6 1c/6 1d/6 1e/6 1f/6 5c/7 fb/8 ' +
  '7ffc/15 20/6 ffb/12 3fc/10 1ffa/13 21/6 5d/7 5e/7 5f/7 60/7 61/7 62/7 ' +
  '63/7 64/7 65/7 66/7 67/7 68/7 69/7 6a/7 6b/7 6c/7 6d/7 6e/7 ' +
  '6f/7 70/7 71/7 72/7 fc/8 73/7 fd/8 1ffb/13 7fff0/19 1ffc/13 3ffc/14 22/6 ' +
  '7ffd/15 3/5 23/6 4/5 24/6 5/5 25/6 26/6 27/6 6/5 74/7 75/7 ' +
  '28/6 29/6 2a/6 7/5 2b/6 76/7 2c/6 8/5 9/5 2d/6 77/7 78/7 ' +
  '79/7 7a/7 7b/7 7ffe/15 7fc/11 3ffd/14 1ffd/13 ffffffc/28 fffe6/20 3fffd2/22 fffe7/20 fffe8/20 ' +
  '3fffd3/22 3fffd4/22 3fffd5/22 7fffd9/23 3fffd6/22 7fffda/23 7fffdb/23 7fffdc/23 7fffdd/23 7fffde/23 ffffeb/24 7fffdf/23 ' +
  'ffffec/24 ffffed/24 3fffd7/22 7fffe0/23 ffffee/24 7fffe1/23 7fffe2/23 7fffe3/23 7fffe4/23 1fffdc/21 3fffd8/22 7fffe5/23 ' +
  '3fffd9/22 7fffe6/23 7fffe7/23 ffffef/24 3fffda/22 1fffdd/21 fffe9/20 3fffdb/22 3fffdc/22 7fffe8/23 7fffe9/23 1fffde/21 ' +
  '7fffea/23 3fffdd/22 3fffde/22 fffff0/24 1fffdf/21 3fffdf/22 7fffeb/23 7fffec/23 1fffe0/21 1fffe1/21 3fffe0/22 1fffe2/21 ' +
  '7fffed/23 3fffe1/22 7fffee/23 7fffef/23 fffea/20 3fffe2/22 3fffe3/22 3fffe4/22 7ffff0/23 3fffe5/22 3fffe6/22 7ffff1/23 ' +
  '3ffffe0/26 3ffffe1/26 fffeb/20 7fff1/19 3fffe7/22 7ffff2/23 3fffe8/22 1ffffec/25 3ffffe2/26 3ffffe3/26 3ffffe4/26 7ffffde/27 ' +
  '7ffffdf/27 3ffffe5/26 fffff1/24 1ffffed/25 7fff2/19 1fffe3/21 3ffffe6/26 7ffffe0/27 7ffffe1/27 3ffffe7/26 7ffffe2/27 fffff2/24 ' +
  '1fffe4/21 1fffe5/21 3ffffe8/26 3ffffe9/26 ffffffd/28 7ffffe3/27 7ffffe4/27 7ffffe5/27 fffec/20 fffff3/24 fffed/20 1fffe6/21 ' +
  '3fffe9/22 1fffe7/21 1fffe8/21 7ffff3/23 3fffea/22 3fffeb/22 1ffffee/25 1ffffef/25 fffff4/24 fffff5/24 3ffffea/26 7ffff4/23 ' +
  '3ffffeb/26 7ffffe6/27 3ffffec/26 3ffffed/26 7ffffe7/27 7ffffe8/27 7ffffe9/27 7ffffea/27 7ffffeb/27 ffffffe/28 7ffffec/27 7ffffed/27 ' +
  '7ffffee/27 7ffffef/27 7fffff0/27 3ffffee/26 3fffffff/30 ' +
  '').trim().split(' ');
// RFC 7541 Appendix A.
const STATIC_TABLE = [
  [':authority', ''], [':method', 'GET'], [':method', 'POST'], [':path', '/'], [':path', '/index.html'],
  [':scheme', 'http'], [':scheme', 'https'], [':status', '200'], [':status', '204'], [':status', '206'],
  [':status', '304'], [':status', '400'], [':status', '404'], [':status', '500'], ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'], ['accept-language', ''], ['accept-ranges', ''], ['accept', ''],
  ['access-control-allow-origin', ''], ['age', ''], ['allow', ''], ['authorization', ''],
  ['cache-control', ''], ['content-disposition', ''], ['content-encoding', ''], ['content-language', ''],
  ['content-length', ''], ['content-location', ''], ['content-range', ''], ['content-type', ''],
  ['cookie', ''], ['date', ''], ['etag', ''], ['expect', ''], ['expires', ''], ['from', ''], ['host', ''],
  ['if-match', ''], ['if-modified-since', ''], ['if-none-match', ''], ['if-range', ''],
  ['if-unmodified-since', ''], ['last-modified', ''], ['link', ''], ['location', ''], ['max-forwards', ''],
  ['proxy-authenticate', ''], ['proxy-authorization', ''], ['range', ''], ['referer', ''], ['refresh', ''],
  ['retry-after', ''], ['server', ''], ['set-cookie', ''], ['strict-transport-security', ''],
  ['transfer-encoding', ''], ['user-agent', ''], ['vary', ''], ['via', ''], ['www-authenticate', ''],
];

export class HpackError extends Error {}

/**
 * The Huffman code as a binary tree in one Int32Array: node n's children are at 2n (bit 0) and 2n+1
 * (bit 1); an entry > 0 is the next node, < 0 is a leaf, -(symbol + 1); 0 is no code.
 */
const TREE = (() => {
  const tree = new Int32Array(2 * 512);
  let nodes = 1;
  HUFFMAN_CODES.forEach((entry, sym) => {
    const [hex, bits] = entry.split('/');
    const code = parseInt(hex, 16);
    const len = Number(bits);
    let node = 0;
    for (let b = len - 1; b > 0; b--) {
      const slot = 2 * node + ((code >>> b) & 1);
      if (tree[slot] === 0) tree[slot] = nodes++;
      node = tree[slot];
    }
    tree[2 * node + (code & 1)] = -(sym + 1);
  });
  return tree;
})();

let scratch = Buffer.allocUnsafe(256); // decoded bytes, grown as needed (to 8/5 of the longest string)

/**
 * Huffman-decodes buf[start, end) to a latin1 string, bytes first and one string at the end (no
 * string per symbol); throws on EOS, bad padding or a code cut short.
 */
function huffmanDecode(buf, start, end) {
  const need = Math.ceil(((end - start) * 8) / 5);
  if (scratch.length < need) scratch = Buffer.allocUnsafe(need);
  let n = 0;
  let node = 0;
  let depth = 0; // bits since the last symbol
  let ones = true; // every bit since the last symbol was 1 (valid padding is a prefix of EOS)
  for (let i = start; i < end; i++) {
    const byte = buf[i];
    for (let b = 7; b >= 0; b--) {
      const bit = (byte >> b) & 1;
      const next = TREE[2 * node + bit];
      if (next < 0) {
        if (next === -257) throw new HpackError('EOS in a Huffman string');
        scratch[n++] = -next - 1;
        node = 0;
        depth = 0;
        ones = true;
      } else {
        node = next;
        depth++;
        if (bit === 0) ones = false;
      }
    }
  }
  if (depth > 7 || !ones) throw new HpackError('bad Huffman padding');
  return scratch.latin1Slice(0, n);
}

/**
 * One connection's decoding context. decode() returns the header list of one complete header block as
 * a flat array [name0, value0, name1, value1, ...]; any HpackError is a connection error
 * (COMPRESSION_ERROR) since the table state is then unknown.
 */
export class HpackDecoder {
  /** @param {number} maxTableSize what this side advertised as SETTINGS_HEADER_TABLE_SIZE */
  constructor(maxTableSize = 4096, maxListSize = 16384) {
    this.settingsMax = maxTableSize; // the ceiling a size update may ask for
    this.max = maxTableSize; // the current size, as the encoder last set it
    this.size = 0;
    this.names = []; // the dynamic table, oldest first; index 62 is the newest
    this.values = [];
    this.maxListSize = maxListSize; // the cap on one decoded header list (name + value + 32 each)
    this.i = 0;
    // The last Huffman string and its code: nghttp2 sends :path as a literal never put in the table,
    // the same bytes on every call of a method, so one comparison replaces decoding it again.
    this.lastCode = Buffer.alloc(0);
    this.lastString = '';
  }

  decode(buf, start, end) {
    const list = [];
    let listSize = 0;
    this.i = start;
    let first = true;
    while (this.i < end) {
      const b = buf[this.i];
      let name;
      let value;
      if (b & 0x80) {
        // Indexed field.
        const idx = this.int(buf, end, 7);
        name = this.name(idx);
        value = this.value(idx);
      } else if ((b & 0xe0) === 0x20) {
        // Dynamic table size update: only at the start of a block.
        if (!first) throw new HpackError('table size update after a field');
        const size = this.int(buf, end, 5);
        if (size > this.settingsMax) throw new HpackError('table size update above the limit');
        this.max = size;
        this.evict(0);
        continue;
      } else {
        // A literal: with incremental indexing (01), without (0000) or never indexed (0001).
        const indexing = (b & 0xc0) === 0x40;
        const idx = this.int(buf, end, indexing ? 6 : 4);
        name = idx === 0 ? this.str(buf, end) : this.name(idx);
        value = this.str(buf, end);
        if (indexing) this.add(name, value);
      }
      first = false;
      listSize += name.length + value.length + 32;
      if (listSize > this.maxListSize) throw new HpackError('header list too large');
      list.push(name, value);
    }
    return list;
  }

  /** An integer with an N-bit prefix (RFC 7541 5.1), capped at 2^28 to stay exact and bounded. */
  int(buf, end, n) {
    const mask = (1 << n) - 1;
    let v = buf[this.i++] & mask;
    if (v < mask) return v;
    let m = 0;
    for (;;) {
      if (this.i >= end) throw new HpackError('integer cut short');
      const b = buf[this.i++];
      v += (b & 0x7f) * 2 ** m;
      m += 7;
      if ((b & 0x80) === 0) return v;
      if (m > 28) throw new HpackError('integer too large');
    }
  }

  str(buf, end) {
    if (this.i >= end) throw new HpackError('string cut short');
    const huff = buf[this.i] & 0x80;
    const len = this.int(buf, end, 7);
    const s = this.i;
    if (s + len > end) throw new HpackError('string cut short');
    this.i = s + len;
    if (!huff) return buf.latin1Slice(s, s + len);
    const last = this.lastCode;
    if (last.length === len && buf.compare(last, 0, len, s, s + len) === 0) return this.lastString;
    this.lastString = huffmanDecode(buf, s, s + len);
    this.lastCode = Buffer.from(buf.subarray(s, s + len));
    return this.lastString;
  }

  /** The dynamic table position of index idx (> 61), checked. */
  slot(idx) {
    const d = this.names.length - (idx - STATIC_TABLE.length);
    if (d < 0) throw new HpackError(`index ${idx} beyond the table`);
    return d;
  }

  name(idx) {
    if (idx === 0) throw new HpackError('index 0');
    return idx <= STATIC_TABLE.length ? STATIC_TABLE[idx - 1][0] : this.names[this.slot(idx)];
  }

  value(idx) {
    return idx <= STATIC_TABLE.length ? STATIC_TABLE[idx - 1][1] : this.values[this.slot(idx)];
  }

  add(name, value) {
    const size = name.length + value.length + 32;
    this.evict(size);
    if (size > this.max) return; // larger than the whole table: the table is left empty
    this.names.push(name);
    this.values.push(value);
    this.size += size;
  }

  /** Evicts the oldest entries until `room` more bytes fit. */
  evict(room) {
    let drop = 0;
    while (this.size + room > this.max && drop < this.names.length) {
      this.size -= this.names[drop].length + this.values[drop].length + 32;
      drop++;
    }
    if (drop > 0) {
      this.names.splice(0, drop);
      this.values.splice(0, drop);
    }
  }
}
