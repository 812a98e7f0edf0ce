import { createHash } from "node:crypto";
import { ENVD_PORT } from "@aenv/protocol";

/** How often the service notes the time, and the gap that means it was frozen meanwhile. */
const TICK_MS = 200;
const FROZEN_MS = 1000;

/**
 * Notices that this sandbox became another one: a sandbox started from the template's warm
 * image, or a fork child, runs the very memory (kernels, generator states) it was captured
 * with. Two signs: an envd access token on /execute that differs from the last one (each such
 * sandbox has its own; the host proxy may keep it from the service), and a gap in the wall
 * clock between two of the service's ticks (every capture freezes the sandbox's processes
 * first, and a restore starts them at a later time). A pause or a long stall counts too: the
 * generators are then reseeded once more, which nothing relies on not happening.
 */
export class Identity {
  private token?: string;
  private last = Date.now();
  private frozen = false;

  constructor() {
    setInterval(() => this.tick(), TICK_MS).unref();
  }

  private tick(): void {
    const now = Date.now();
    if (now - this.last > FROZEN_MS) this.frozen = true;
    this.last = now;
  }

  /** Whether the sandbox changed since the last call (the first call with a token counts). */
  changed(accessToken: string | undefined): boolean {
    this.tick();
    let changed = this.frozen;
    this.frozen = false;
    if (accessToken) {
      const fp = createHash("sha256").update(accessToken).digest("hex");
      if (fp !== this.token) changed = true;
      this.token = fp;
    }
    return changed;
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
