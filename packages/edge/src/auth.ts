import type { IncomingHttpHeaders } from "node:http";
import { keyOf } from "./tenancy.js";
import { TENANT_KEY_FORM, type Tenants } from "./tenants.js";

/**
 * Whether an Authorization header value is `Bearer <an API key>`: the operator's, or any of the
 * form this server gives keys (checked by form, not looked up: the proxy strips it either way,
 * so no client key reaches a sandbox).
 */
export function bearerKeyMatcher(tenants: Pick<Tenants, "isOperator">): (authorization: string) => boolean {
  return (auth) => {
    if (!auth.startsWith("Bearer ")) return false;
    const key = auth.slice(7);
    return tenants.isOperator(key) || TENANT_KEY_FORM.test(key);
  };
}

/**
 * Whether a request carries the operator's key (X-API-Key, or Authorization: Bearer), without a
 * store read: the connection guard's "trusted" test, on a node and a gateway. Constant-time.
 */
export function operatorKeyCheck(
  tenants: Pick<Tenants, "isOperator">,
): (req: { headers: IncomingHttpHeaders }) => boolean {
  return (req) => {
    const key = keyOf(req.headers);
    return !!key && tenants.isOperator(key);
  };
}
