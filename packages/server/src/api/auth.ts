import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { FastifyInstance } from "fastify";
import { UnauthorizedError } from "../errors.js";
import { NO_API_KEY } from "../http-errors.js";

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Whether a value is the API key. Constant-time. */
export function apiKeyMatcher(apiKey: string): (value: string) => boolean {
  const want = digest(apiKey);
  return (got) => timingSafeEqual(digest(got), want);
}

/** Whether an Authorization header value is `Bearer <API key>`. */
export function bearerKeyMatcher(apiKey: string): (authorization: string) => boolean {
  const isKey = apiKeyMatcher(apiKey);
  return (auth) => auth.startsWith("Bearer ") && isKey(auth.slice(7));
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

/** X-API-Key on every control-plane route except GET /health and self-authenticating ones. */
export function installAuth(app: FastifyInstance, apiKey: string): void {
  const hasKey = apiKeyCheck(apiKey);
  app.addHook("onRequest", async (req) => {
    if (req.method === "GET" && req.url === "/health") return;
    // Routes that authenticate themselves (signed upload links, volume tokens).
    if ((req.routeOptions.config as { public?: boolean } | undefined)?.public) return;
    if (!hasKey(req)) throw new UnauthorizedError(NO_API_KEY);
  });
}
