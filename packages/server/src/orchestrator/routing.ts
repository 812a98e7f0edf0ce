import { AtCapacityError, NotFoundError, UpstreamError } from "@aenv/edge/errors";
import { autoResumable, pausedError } from "./pause-kinds.js";
import type { SandboxRegistry } from "./registry.js";
import type { Resumer } from "./resumer.js";

/**
 * Where the proxy sends traffic for a sandbox: waits out captures and resumes in flight, and
 * resumes a paused sandbox when its autoResume is on. Throws NotFoundError, PausedError or
 * UpstreamError; the proxy turns them into answers.
 */
export async function routeTo(
  registry: SandboxRegistry,
  resumer: Pick<Resumer, "resume">,
  id: string,
): Promise<{ ip: string }> {
  // Traffic caught by a client's pause in progress does not undo it: it is answered as paused
  // (the SDK's health probe after the pause cut its stream must not resume the sandbox). A
  // save by hibernation is invisible to clients: traffic that waited for one resumes it.
  let waitedForPause = false;
  for (let attempt = 0; attempt < 5; attempt++) {
    const l = registry.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
      throw new NotFoundError(`sandbox '${id}' not found or not running`);
    }
    if (l.gate) {
      waitedForPause ||= l.inflight?.kind === "pause";
      await l.gate.catch(() => {});
      continue;
    }
    if (l.inflight) {
      waitedForPause ||= l.inflight.kind === "pause";
      await l.inflight.p.catch(() => {});
      continue;
    }
    if (l.rec.state === "paused") {
      if (!autoResumable(l.rec) || (waitedForPause && !l.rec.pause?.idleSaved)) throw pausedError(l.rec);
      try {
        await resumer.resume(id, undefined);
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
