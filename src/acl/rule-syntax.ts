/**
 * What every ACL rule and user name is checked against, wherever it comes from (ACL SETUSER, the
 * ACL file): the error a refused rule gets, and Redis's rule that no name or pattern holds a space.
 */

/** A refused rule or ACL file line, with Redis's reason. */
export class AclRuleError extends Error {}

/** Redis refuses usernames with spaces or NUL bytes. */
export function validUserName(name: string): boolean {
  return !hasSpaces(name) && name.length > 0;
}

/**
 * Redis's ACLStringHasSpaces: a C isspace() byte (space, \t, \n, \v, \f, \r) or NUL. User names and
 * key and channel patterns holding one are refused, so every rule is one word of the ACL file. Not
 * JS's \s, which also takes the byte 0xA0 (NBSP in latin1): a binary-safe name may hold that.
 */
export function hasSpaces(text: string): boolean {
  return /[ \t\n\v\f\r\0]/.test(text);
}
