/**
 * The Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key, or of its hash tag — the bytes
 * between the first `{` and the next `}` when that is not empty — modulo 16384, as Redis's
 * keyHashSlot. RL.ALL needs it to refuse keys on different slots before sending anything (a
 * Cluster cannot run one script across slots). A table-driven CRC over the key's bytes: no
 * string is made.
 */

const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
  TABLE[i] = crc & 0xffff;
}

function crc16(bytes: Uint8Array, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ bytes[i]) & 0xff];
  return crc;
}

export const CLUSTER_SLOTS = 16384;

export function keySlot(key: Uint8Array): number {
  const open = key.indexOf(0x7b);
  if (open !== -1) {
    const close = key.indexOf(0x7d, open + 1);
    if (close !== -1 && close > open + 1) return crc16(key, open + 1, close) & (CLUSTER_SLOTS - 1);
  }
  return crc16(key, 0, key.length) & (CLUSTER_SLOTS - 1);
}
