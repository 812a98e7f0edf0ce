import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { TENANT_KEY_FORM } from "../tenancy/tenants.js";

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Whether a value is the API key. Constant-time. */
export function apiKeyMatcher(apiKey: string): (value: string) => boolean {
  const want = digest(apiKey);
  return (got) => timingSafeEqual(digest(got), want);
}

/**
 * Whether an Authorization header value is `Bearer <an API key>`: the operator's, or any of the
 * form this server gives keys (checked by form, not looked up: the proxy strips it either way,
 * so no client key reaches a sandbox).
 */
export function bearerKeyMatcher(apiKey: string): (authorization: string) => boolean {
  const isKey = apiKeyMatcher(apiKey);
  return (auth) => auth.startsWith("Bearer ") && (isKey(auth.slice(7)) || TENANT_KEY_FORM.test(auth.slice(7)));
}

/** Whether a request carries the API key (X-API-Key, or Authorization: Bearer). Constant-time. */
export function apiKeyCheck(apiKey: string): (req: { headers: IncomingHttpHeaders }) => boolean {
  const isKey = apiKeyMatcher(apiKey);
  return (req) => {
    const auth = req.headers.authorization;
    const got =
      (req.headers["x-api-key"] as string | undefined) ?? (auth?.startsWith("Bearer ") ? auth.slice(7) : undefined);
    return !!got && isKey(got);
  };
}
