import { newSandboxId } from "../state/ids.js";
import { CleanupStack } from "./cleanup-stack.js";
import type { NodeContext } from "./node-context.js";
import { newSandboxRecord } from "./records.js";
import type { Live } from "./registry.js";

export interface BuildSandbox {
  ip: string;
  /** Stops it and waits until it is fully gone (its rootfs becomes a template next). */
  close(): Promise<void>;
}

/**
 * A throwaway sandbox whose writes go straight to `rootfs`, for template build steps (which
 * its envd runs: templates/in-sandbox.ts); the caller runs the steps and must call close().
 */
export async function startBuildSandbox(
  ctx: NodeContext,
  opts: { rootfs: string; cpuCount: number; memoryMB: number; mounts: Record<string, string> },
): Promise<BuildSandbox> {
  ctx.registry.assertOpen();
  const id = newSandboxId();
  const rec = newSandboxRecord(ctx.cfg, {
    id,
    dir: ctx.paths.sandbox(id),
    templateId: "build",
    alias: "build",
    rootfs: opts.rootfs,
    runtimeDir: ctx.runtimeDir,
    req: { templateID: "build" },
    sizing: { cpuCount: opts.cpuCount, memoryMB: opts.memoryMB, diskSizeMB: 0 },
  });
  const live: Live = {
    rec,
    op: Promise.resolve(),
    ephemeral: true,
    launchExtras: { writableRootfs: true, readOnlyMounts: opts.mounts },
  };
  // Its rootfs becomes a template next: whatever removes it waits until the runtime is gone.
  const removeNow = async () => {
    const runtimeId = rec.runtimeId;
    await ctx.runner.remove(live, false);
    await ctx.runner.removed(runtimeId);
  };
  const undo = new CleanupStack(ctx.log, { sandboxID: id });
  undo.defer("runtime", removeNow);
  try {
    await ctx.runner.bring(live, { kind: "boot" }, { defaultUser: "root", defaultWorkdir: "/" });
  } catch (err) {
    await undo.unwind();
    throw err;
  }
  undo.release();
  return { ip: live.slot?.slotIp as string, close: removeNow };
}
