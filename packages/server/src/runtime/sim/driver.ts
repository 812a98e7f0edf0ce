import { existsSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type {
  CpuMeter,
  Freezer,
  RuntimeDriver,
  RuntimeInfo,
  SandboxLaunch,
  SandboxStats,
  Suspender,
} from "../driver.js";
import { EnvdStandIn } from "./envd-standin.js";
import { LatencyModel } from "./latency.js";

/** The one file of a simulated image: written last, so its presence means the image is whole. */
export const SIM_IMAGE_FILE = "sim-image.json";

/** Bumped when what an image holds changes: a checkpoint restores only under the same key. */
const SIM_VERSION = "sim-1";

type SimState = "running" | "frozen" | "suspended";

interface SimSandbox {
  envd: EnvdStandIn;
  state: SimState;
}

/**
 * The simulated runtime (`runtime.driver = "sim"`): a sandbox is a record in this process
 * and an envd stand-in on its slot address; boot, restore, checkpoint and the rest take times
 * drawn from the figures measured on real runsc (latency.ts) and use no CPU. Everything
 * around it, the orchestrator, state, repository, cluster membership and proxy, is the real
 * node. For scale tests of many nodes on one host (bench/cluster-scale.ts); its sandboxes run
 * nothing (envd-standin.ts says what a command does).
 */
export class SimDriver implements RuntimeDriver, Freezer, Suspender, CpuMeter {
  readonly name = "sim";
  readonly quiesceBeforeCheckpoint = false;
  readonly freezer: Freezer = this;
  readonly suspender: Suspender = this;
  readonly cpuMeter: CpuMeter = this;
  private readonly sandboxes = new Map<string, SimSandbox>();
  private readonly latency: LatencyModel;

  private readonly version: string;

  constructor(opts: { latencyScale?: number; random?: () => number; version?: string } = {}) {
    this.latency = new LatencyModel(opts.latencyScale ?? 1, opts.random);
    this.version = opts.version ?? SIM_VERSION;
  }

  async probe(): Promise<RuntimeInfo> {
    return { driver: "sim", version: this.version, platform: "sim", checkpointKey: this.version };
  }

  async start(launch: SandboxLaunch): Promise<void> {
    await this.latency.wait("boot");
    await this.up(launch);
  }

  async restore(launch: SandboxLaunch, imageDir: string): Promise<void> {
    if (!this.isCompleteCheckpoint(imageDir)) throw new Error(`sim: ${imageDir} holds no simulated image`);
    await this.latency.wait("restore");
    await this.up(launch);
  }

  private async up(launch: SandboxLaunch): Promise<void> {
    if (this.sandboxes.has(launch.id)) throw new Error(`sim: sandbox ${launch.id} exists`);
    if (!launch.envdAddress)
      throw new Error("sim: the launch names no envd address (the sim driver needs loopback slots)");
    const envd = new EnvdStandIn(launch.envdAddress, this.latency);
    await envd.listen();
    this.sandboxes.set(launch.id, { envd, state: "running" });
  }

  async checkpoint(id: string, imageDir: string, opts: { leaveRunning: boolean }): Promise<void> {
    this.get(id);
    await this.latency.wait("checkpoint");
    const tmp = join(imageDir, `${SIM_IMAGE_FILE}.tmp`);
    writeFileSync(tmp, `${JSON.stringify({ version: SIM_VERSION, source: id, takenAt: new Date().toISOString() })}\n`);
    renameSync(tmp, join(imageDir, SIM_IMAGE_FILE));
    if (!opts.leaveRunning) await this.stop(id);
  }

  isCompleteCheckpoint(imageDir: string | undefined): boolean {
    return imageDir !== undefined && existsSync(join(imageDir, SIM_IMAGE_FILE));
  }

  checkpointBytes(imageDir: string): number {
    try {
      return statSync(join(imageDir, SIM_IMAGE_FILE)).size;
    } catch {
      return 0;
    }
  }

  async stop(id: string): Promise<void> {
    const sb = this.sandboxes.get(id);
    if (!sb) return;
    this.sandboxes.delete(id);
    await sb.envd.close();
  }

  async destroy(id: string): Promise<void> {
    await this.stop(id);
    await this.latency.wait("destroy");
  }

  async isRunning(id: string): Promise<boolean> {
    return this.sandboxes.has(id);
  }

  async stats(id: string): Promise<SandboxStats | undefined> {
    return this.sandboxes.has(id) ? { cpuUsedPct: 0, memUsedBytes: 0, memCacheBytes: 0 } : undefined;
  }

  async freeze(id: string): Promise<void> {
    await this.transition(id, "freeze", "frozen");
  }

  /** The simulated runtime has no CPU to share. */
  async prioritize(_id: string): Promise<void> {}

  async thaw(id: string): Promise<void> {
    await this.transition(id, "thaw", "running");
  }

  async suspend(id: string): Promise<void> {
    await this.transition(id, "suspend", "suspended");
  }

  async unsuspend(id: string): Promise<void> {
    await this.transition(id, "unsuspend", "running");
  }

  isSuspended(id: string): boolean {
    return this.sandboxes.get(id)?.state === "suspended";
  }

  /** A simulated sandbox never uses CPU: it counts as idle for hibernation. */
  cpuTimeNs(id: string): number | undefined {
    return this.sandboxes.has(id) ? 0 : undefined;
  }

  /** Every simulated sandbox exists only while it runs (frozen or suspended included), as its process would. */
  async list(): Promise<string[]> {
    return [...this.sandboxes.keys()];
  }

  private get(id: string): SimSandbox {
    const sb = this.sandboxes.get(id);
    if (!sb) throw new Error(`sim: no sandbox ${id}`);
    return sb;
  }

  private async transition(id: string, op: "freeze" | "thaw" | "suspend" | "unsuspend", to: SimState): Promise<void> {
    this.get(id);
    await this.latency.wait(op);
    this.get(id).state = to;
  }
}
