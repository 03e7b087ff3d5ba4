/**
 * Version numbers, in a module of their own so that the server, the commands (INFO, HELLO) and the
 * metrics port all read them without importing each other.
 */

/** cellgate's own version (INFO cellgate_version, the metrics port's build info, --version). */
export const VERSION = '0.2.0';
/** The Redis version whose protocol and replies cellgate matches (INFO redis_version, HELLO). */
export const REDIS_VERSION = '7.2.4';
