import { rmSync } from "node:fs";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";
import type { PauseResume } from "./pause-resume.js";

/**
 * Pauses every running sandbox of a closed registry and waits until each image is committed
 * to the repository; those committed are forgotten here (another node owns them from now on,
 * and this one must not take them back after a restart). A sandbox whose pause or commit
 * failed is named in `failed`: it is lost with this node.
 */
export async function drainNode(
  ctx: NodeContext,
  uses: {
    pauses: PauseResume;
    commits: PauseCommits;
  },
): Promise<{ paused: string[]; failed: string[] }> {
  const running = ctx.registry.all().filter((l) => l.rec.state === "running");
  const failed: string[] = [];
  await Promise.all(
    running.map((l) =>
      uses.pauses.pause(l.rec.id).catch((err) => {
        failed.push(l.rec.id);
        ctx.log.error({ err, sandboxID: l.rec.id }, "drain: pause failed; the sandbox is lost with this node");
      }),
    ),
  );
  await uses.pauses.imagesWritten();
  await uses.commits.flush();
  const paused: string[] = [];
  for (const l of ctx.registry.all().filter((x) => x.rec.state === "paused")) {
    if (!(await uses.commits.committed(l.rec.id))) {
      failed.push(l.rec.id);
      continue;
    }
    ctx.states.forget(l.rec.id);
    ctx.registry.remove(l.rec.id);
    rmSync(l.rec.dir, { recursive: true, force: true });
    paused.push(l.rec.id);
  }
  return { paused, failed };
}
