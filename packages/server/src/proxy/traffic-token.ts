import { createHash, timingSafeEqual } from "node:crypto";
import { ENVD_PORT } from "@aenv/protocol";

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * Why traffic may not reach `port` of a private sandbox (a 403), or undefined. Every port but
 * envd's needs the sandbox's traffic token. The node's proxy asks this before routing, and a
 * node asks it before resuming a sandbox for traffic a gateway passed on, so unauthenticated
 * traffic never even resumes a private sandbox.
 */
export function trafficTokenProblem(
  sandboxId: string,
  port: number,
  presented: string | undefined,
  trafficToken: string | undefined,
): string | undefined {
  if (!trafficToken || port === ENVD_PORT) return undefined;
  if (presented && timingSafeEqual(digest(presented), digest(trafficToken))) return undefined;
  return `sandbox '${sandboxId}' is private: send its traffic access token in e2b-traffic-access-token`;
}
