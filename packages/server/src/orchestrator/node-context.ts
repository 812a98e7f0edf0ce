import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { SlotAllocator } from "../network/slots.js";
import type { NodePaths } from "../node-paths.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { TemplateStore } from "../state/template-catalog.js";
import type { SnapshotRepository } from "../storage/repository/repository.js";
import type { LifecycleEvents } from "./lifecycle-events.js";
import type { SandboxRegistry } from "./registry.js";
import type { SandboxRunner } from "./runner.js";
import type { SandboxStates } from "./sandbox-states.js";

/**
 * What every lifecycle module of one node works with: its settings and folders, its sandboxes
 * (registry, states) and how they are brought up and down (runner), where images are
 * committed, its templates and who hears of lifecycle events. Built once by the Orchestrator;
 * each module takes it and, beside it, only the other lifecycle modules it calls. The core
 * pieces in it (registry, runner, states) cannot take it themselves: they are built first.
 */
export interface NodeContext {
  cfg: ServerConfig;
  paths: NodePaths;
  /** The one place sandbox states change and records are persisted (sandbox-states.ts). */
  states: SandboxStates;
  registry: SandboxRegistry;
  runner: SandboxRunner;
  driver: RuntimeDriver;
  slots: SlotAllocator;
  /** Where snapshots and paused sandboxes are committed; node-local images are copies. */
  repository: SnapshotRepository;
  templates: TemplateStore;
  /** Checkpoints restore only on a runtime with this key (driver build, platform, /.aenv). */
  checkpointKey: string;
  /** The /.aenv folder new sandboxes get (envd and its tools); template build sandboxes too. */
  runtimeDir: string;
  /** Created, killed, paused, resumed, updated, forked: what clients (webhooks) are told. */
  events: LifecycleEvents;
  log: Logger;
}
