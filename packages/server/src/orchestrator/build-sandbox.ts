import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import { newSandboxId } from "../state/ids.js";
import { newSandboxRecord } from "./records.js";
import type { Live, SandboxRegistry } from "./registry.js";
import type { SandboxRunner } from "./runner.js";

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
  d: {
    cfg: ServerConfig;
    paths: NodePaths;
    registry: SandboxRegistry;
    runner: SandboxRunner;
    runtimeDir: string;
  },
  opts: { rootfs: string; cpuCount: number; memoryMB: number; mounts: Record<string, string> },
): Promise<BuildSandbox> {
  d.registry.assertOpen();
  const id = newSandboxId();
  const rec = newSandboxRecord(d.cfg, {
    id,
    dir: d.paths.sandbox(id),
    templateId: "build",
    alias: "build",
    rootfs: opts.rootfs,
    runtimeDir: d.runtimeDir,
    req: { templateID: "build" },
    sizing: { cpuCount: opts.cpuCount, memoryMB: opts.memoryMB, diskSizeMB: 0 },
  });
  const live: Live = {
    rec,
    op: Promise.resolve(),
    ephemeral: true,
    launchExtras: { writableRootfs: true, readOnlyMounts: opts.mounts },
  };
  try {
    await d.runner.bring(live, { kind: "boot" }, { defaultUser: "root", defaultWorkdir: "/" });
  } catch (err) {
    await d.runner.remove(live, false);
    await d.runner.removed(rec.runtimeId);
    throw err;
  }
  return {
    ip: live.slot?.slotIp as string,
    close: async () => {
      const runtimeId = rec.runtimeId;
      await d.runner.remove(live, false);
      await d.runner.removed(runtimeId);
    },
  };
}
