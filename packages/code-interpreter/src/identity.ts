import { createHash } from "node:crypto";
import { ENVD_PORT } from "@aenv/protocol";

/**
 * Notices that this sandbox became another one: a sandbox started from the template's warm
 * image, or a fork child, runs the very memory (kernels, generator states) it was captured
 * with. Each such sandbox gets its own envd access token, which the SDK sends on every
 * /execute; a request without one falls back to the clock: a restore moves the wall clock
 * against the process's monotonic one by the time spent captured. Only noticed, never
 * checked: the host decides who may call this port.
 */
export class Identity {
  private token?: string;
  private offset = Date.now() - performance.now();

  /** Whether the sandbox changed since the last call (the first call with a token counts). */
  changed(accessToken: string | undefined): boolean {
    const offset = Date.now() - performance.now();
    const jumped = Math.abs(offset - this.offset) > 2000;
    this.offset = offset;
    if (accessToken) {
      const fp = createHash("sha256").update(accessToken).digest("hex");
      const changed = fp !== this.token;
      this.token = fp;
      return changed;
    }
    return jumped;
  }
}

/** The sandbox-wide variables (create's envVars) from envd, as E2B's server loads them. */
export async function sandboxEnv(accessToken: string | undefined): Promise<Record<string, string>> {
  try {
    const r = await fetch(`http://127.0.0.1:${ENVD_PORT}/envs`, {
      headers: accessToken ? { "x-access-token": accessToken } : {},
      signal: AbortSignal.timeout(5000),
    });
    if (!r.ok) return {};
    const body = (await r.json()) as unknown;
    if (!body || typeof body !== "object") return {};
    return Object.fromEntries(Object.entries(body).filter((e): e is [string, string] => typeof e[1] === "string"));
  } catch {
    return {};
  }
}
