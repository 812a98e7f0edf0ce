import { rmSync } from "node:fs";
import type { Logger } from "pino";
import type { PauseCommits } from "./pause-commits.js";
import type { PauseResume } from "./pause-resume.js";
import type { SandboxRegistry } from "./registry.js";
import type { SandboxStates } from "./sandbox-states.js";

/**
 * Pauses every running sandbox of a closed registry and waits until each image is committed
 * to the repository; those committed are forgotten here (another node owns them from now on,
 * and this one must not take them back after a restart). A sandbox whose pause or commit
 * failed is named in `failed`: it is lost with this node.
 */
export async function drainNode(d: {
  registry: SandboxRegistry;
  states: SandboxStates;
  pause: (id: string) => Promise<void>;
  pauses: PauseResume;
  commits: PauseCommits;
  log: Logger;
}): Promise<{ paused: string[]; failed: string[] }> {
  const running = d.registry.all().filter((l) => l.rec.state === "running");
  const failed: string[] = [];
  await Promise.all(
    running.map((l) =>
      d.pause(l.rec.id).catch((err) => {
        failed.push(l.rec.id);
        d.log.error({ err, sandboxID: l.rec.id }, "drain: pause failed; the sandbox is lost with this node");
      }),
    ),
  );
  await d.pauses.imagesWritten();
  await d.commits.flush();
  const paused: string[] = [];
  for (const l of d.registry.all().filter((x) => x.rec.state === "paused")) {
    if (!(await d.commits.committed(l.rec.id))) {
      failed.push(l.rec.id);
      continue;
    }
    d.states.forget(l.rec.id);
    d.registry.remove(l.rec.id);
    rmSync(l.rec.dir, { recursive: true, force: true });
    paused.push(l.rec.id);
  }
  return { paused, failed };
}
