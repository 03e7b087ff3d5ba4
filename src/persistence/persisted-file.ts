/**
 * The bound on the files persistence loads (a snapshot, a journal base, a journal incremental file):
 * each is read whole into memory, so only a regular file of at most MAX_PERSISTED_FILE_BYTES is
 * read. A FIFO or a symlink to /dev/zero named as one of them is refused at once with its reason,
 * never waited on or read without end (src/files/regular-file.ts). 4 GiB is far above what a
 * keyspace that fits in memory writes, and the most one Buffer holds on Node 20.
 */
import { constants } from 'node:buffer';
import type { RegularFileLimits } from '../files/regular-file.js';

export const MAX_PERSISTED_FILE_BYTES = Math.min(4 * 1024 * 1024 * 1024, constants.MAX_LENGTH);

export const SNAPSHOT_FILE: RegularFileLimits = { maxBytes: MAX_PERSISTED_FILE_BYTES, what: 'snapshot' };
export const JOURNAL_FILE: RegularFileLimits = { maxBytes: MAX_PERSISTED_FILE_BYTES, what: 'journal file' };
