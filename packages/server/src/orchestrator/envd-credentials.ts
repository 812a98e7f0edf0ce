/**
 * Two credentials per sandbox, so that nothing a sandbox can read opens it from outside.
 *
 * - The **client token** (`rec.envdToken`, E2B's `envdAccessToken`) is what SDK clients send.
 *   It stays on the host: the proxy checks it (and signatures made with it) and never
 *   forwards it into a sandbox.
 * - The **host token** is what envd inside the sandbox holds and what the proxy and the
 *   server send it. It is a one-way function of the client token: a fork child or a snapshot
 *   start finds its source's host token in the memory it restored, and that is useless,
 *   because the proxy accepts only client tokens and no sandbox can reach another's envd.
 *
 * Derived, not random, so every node of a cluster computes it from the record it has.
 */
import { createHash } from "node:crypto";
import type { SandboxRecord } from "../state/store.js";

const DOMAIN = "aenv envd host token v1\n";

export function envdHostToken(clientToken: string): string {
  return createHash("sha256").update(DOMAIN).update(clientToken).digest("base64url");
}

/**
 * The token this sandbox's envd holds now: the host token once the server has initialised
 * it with one; the client token itself for a sandbox whose envd was initialised before host
 * tokens existed (its pause image still holds that), until its next initialisation.
 */
export function envdTokenOf(rec: Pick<SandboxRecord, "envdToken" | "envdCredential">): string {
  return rec.envdCredential === "host" ? envdHostToken(rec.envdToken) : rec.envdToken;
}

const TRAFFIC_DOMAIN = "aenv code interpreter traffic token v1\n";

/**
 * The traffic access token a sandbox's create and connect answers carry. A private sandbox
 * (`allowPublicTraffic: false`) has its own random one, which every port but envd's needs. A
 * public sandbox gets one derived from its client token: no port needs it, but the SDKs send
 * the traffic token, and only it, on the code interpreter's context routes (they send the
 * envd access token on /execute alone), so it is what authenticates those calls
 * (proxy/envd-auth.ts). It never enters the sandbox (the proxy removes the header).
 */
export function trafficTokenOf(rec: Pick<SandboxRecord, "envdToken" | "trafficToken">): string {
  return rec.trafficToken ?? createHash("sha256").update(TRAFFIC_DOMAIN).update(rec.envdToken).digest("base64url");
}
