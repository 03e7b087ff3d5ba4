/**
 * The ACL log (ACL LOG): the denials and failed AUTHs, newest first, a repeat within a minute
 * counted in its entry rather than added, as Redis's addACLLogEntry.
 */
import { loggedText } from '../log-text.js';

export interface AclLogEntry {
  count: number;
  reason: 'command' | 'key' | 'auth' | 'channel';
  context: string;
  object: string;
  username: string;
  clientInfo: string;
  entryId: number;
  createdMs: number;
  updatedMs: number;
}

/** Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA: a repeat of an entry within this is counted in it. */
const LOG_GROUPING_MS = 60_000;
/** Redis looks for a repeat among this many newest entries only (bounded work per denial). */
const LOG_GROUPING_SCAN = 10;
/**
 * How much of a refused key or a user name an ACL LOG entry keeps (src/log-text.ts). Redis keeps
 * them whole; 128 entries of a 512 MiB key each would be 64 GiB.
 */
export const ACL_LOG_TEXT_BYTES = 1024;
/** Redis's acllog-max-len default. */
const LOG_MAX_LEN = 128;

/**
 * Adds an entry to `log` (newest first), or counts a repeat in one of the 10 newest (see Acl.addLog).
 * `entryId` is the id a new entry takes; returns whether it was taken.
 */
export function addLogEntry(log: AclLogEntry[], entryId: number, reason: AclLogEntry['reason'], context: string, object: string, username: string, clientInfo: string, nowMs: number): boolean {
  username = loggedText(username, ACL_LOG_TEXT_BYTES);
  const scan = Math.min(log.length, LOG_GROUPING_SCAN);
  for (let i = 0; i < scan; i++) {
    const e = log[i];
    if (e.reason === reason && e.context === context && e.object === object && e.username === username && nowMs - e.updatedMs < LOG_GROUPING_MS) {
      e.count++;
      e.updatedMs = nowMs;
      e.clientInfo = clientInfo;
      // The most recently updated entry comes first, as Redis moves it to the head.
      log.splice(i, 1);
      log.unshift(e);
      return false;
    }
  }
  log.unshift({ count: 1, reason, context, object, username, clientInfo, entryId, createdMs: nowMs, updatedMs: nowMs });
  if (log.length > LOG_MAX_LEN) log.length = LOG_MAX_LEN;
  return true;
}
