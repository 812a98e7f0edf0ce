import { AtCapacityError, NotFoundError, UpstreamError } from "../errors.js";
import { autoResumable, pausedError } from "./pause-resume.js";
import type { SandboxRegistry } from "./registry.js";

/**
 * Where the proxy sends traffic for a sandbox: waits out captures and resumes in flight, and
 * resumes a paused sandbox when its autoResume is on. Throws NotFoundError, PausedError or
 * UpstreamError; the proxy turns them into answers.
 */
export async function routeTo(
  registry: SandboxRegistry,
  resume: (id: string) => Promise<unknown>,
  id: string,
): Promise<{ ip: string }> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const l = registry.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
      throw new NotFoundError(`sandbox '${id}' not found or not running`);
    }
    if (l.gate) {
      await l.gate.catch(() => {});
      continue;
    }
    if (l.inflight) {
      await l.inflight.p.catch(() => {});
      continue;
    }
    if (l.rec.state === "paused") {
      if (!autoResumable(l.rec)) throw pausedError(l.rec);
      try {
        await resume(id);
      } catch (err) {
        // A full node is the caller's 429 to retry later, not a broken upstream.
        if (err instanceof AtCapacityError) throw err;
        throw new UpstreamError(`auto-resume of sandbox '${id}' failed: ${(err as Error).message}`);
      }
      continue;
    }
    if (l.slot) {
      await registry.wake(l);
      return { ip: l.slot.slotIp };
    }
  }
  throw new UpstreamError(`sandbox '${id}' is not reachable`);
}
