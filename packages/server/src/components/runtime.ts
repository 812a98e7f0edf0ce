import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import type { RuntimeDriver, RuntimeInfo } from "../runtime/driver.js";
import { GvisorDriver } from "../runtime/gvisor/driver.js";
import { pinnedPlatform } from "../runtime/gvisor/platform-choice.js";
import { SimDriver } from "../runtime/sim/driver.js";
import type { PathGate } from "../util/path-gate.js";
import type { Component } from "./component.js";

export interface Runtime extends Component {
  driver: RuntimeDriver;
  /** The runtime's probe, in flight: gVisor's starts a throwaway sandbox (~0.4 s). */
  probing: Promise<RuntimeInfo>;
}

/** The sandbox runtime the config names, its probe started: the steps up to the orchestrator go on meanwhile. */
export function startRuntime(cfg: ServerConfig, paths: NodePaths, rootfsGate: PathGate, log: Logger): Runtime {
  if (cfg.runtimeDriver === "sim") {
    const driver = new SimDriver({ latencyScale: cfg.simLatencyScale, version: cfg.simVersion });
    log.warn(
      { latencyScale: cfg.simLatencyScale },
      "runtime driver 'sim': sandboxes are simulated, nothing runs in them",
    );
    return { driver, probing: driver.probe(), async stop() {} };
  }
  // Read before the state database is opened: a data dir that has one already is not new.
  const pin = pinnedPlatform(paths.runtimePlatform, paths.stateDb);
  const driver = new GvisorDriver({
    binary: cfg.runscBinary,
    stateDir: paths.runtimeState,
    platform: cfg.platform,
    platformRecord: paths.runtimePlatform,
    ...(pin ? { platformPin: pin } : {}),
    enforceDiskSize: cfg.enforceDiskSize,
    disksDir: paths.formattedDisks,
    debugLogDir: cfg.runscDebugLog,
    maxConsoleBytes: cfg.maxConsoleBytes,
    rootfsGate,
    log: log.child({ component: "gvisor" }),
  });
  const probing = driver.probe();
  // Awaited later; a failure of a step before that must not leave its rejection unhandled.
  probing.catch(() => {});
  return {
    driver,
    probing,
    async stop() {
      await driver.disks?.close();
    },
  };
}
