/** Types for fill.mjs (the persistence tests import it). */
export function fillThrottleKeys(
  port: number,
  n: number,
  options?: { prefix?: string; burst?: number; count?: number; period?: number },
): Promise<void>;
