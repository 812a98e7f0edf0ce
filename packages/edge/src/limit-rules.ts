import { KeyLimitError } from "./errors.js";
import { countKeyRefusal } from "./key-metrics.js";
import type { Tenant } from "./tenants.js";

/** E2B counts its lifecycle calls over 30 s. */
export const DEFAULT_WINDOW_S = 30;

/**
 * What a key's limits allow now, from counts the caller holds (in memory on a node, in Redis at
 * a gateway): the one place the rules and their Retry-After are written.
 */
export const limitRules = {
  /** A create of `n` beside `running` sandboxes of the key and `pending` creates in flight. */
  sandboxes(t: Tenant, running: number, pending: number, n: number): KeyLimitError | undefined {
    const l = t.limits ?? {};
    if (l.maxSandboxes === undefined || running + pending + n <= l.maxSandboxes) return undefined;
    return refused(
      t,
      `this API key may run ${l.maxSandboxes} sandboxes at once (${running} running, ${pending} starting); kill or pause one, or retry`,
      "sandboxes",
      1,
    );
  },
  creates: (t: Tenant, waitS: number) =>
    refused(
      t,
      `this API key may create ${t.limits?.createsPerSecond} sandboxes a second; retry in ${waitS} s`,
      "rate",
      waitS,
    ),
  calls: (t: Tenant, waitS: number) =>
    refused(
      t,
      `this API key may make ${t.limits?.callsPerWindow} API calls in ${t.limits?.windowSeconds ?? DEFAULT_WINDOW_S} s; retry in ${waitS} s`,
      "rate",
      waitS,
    ),
};

/** A refusal by `t`'s limits, counted on /metrics. */
function refused(t: Tenant, message: string, limit: "sandboxes" | "rate", retryAfterS: number): KeyLimitError {
  countKeyRefusal(t.id, limit);
  return new KeyLimitError(message, limit, retryAfterS);
}
