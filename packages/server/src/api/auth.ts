import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { UnauthorizedError } from "../errors.js";

const digest = (s: string) => createHash("sha256").update(s).digest();

/** X-API-Key on every control-plane route except GET /health and self-authenticating ones. Constant-time. */
export function installAuth(app: FastifyInstance, apiKey: string): void {
  const want = digest(apiKey);
  app.addHook("onRequest", async (req) => {
    if (req.method === "GET" && req.url === "/health") return;
    // Routes that authenticate themselves (signed upload links).
    if ((req.routeOptions.config as { public?: boolean } | undefined)?.public) return;
    const auth = req.headers.authorization;
    const got =
      (req.headers["x-api-key"] as string | undefined) ?? (auth?.startsWith("Bearer ") ? auth.slice(7) : undefined);
    if (!got || !timingSafeEqual(digest(got), want)) {
      throw new UnauthorizedError("invalid or missing API key (X-API-Key)");
    }
  });
}
