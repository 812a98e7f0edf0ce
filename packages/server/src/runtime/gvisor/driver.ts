import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { setPriority } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import { exec } from "../../util/exec.js";
import type { PathGate } from "../../util/path-gate.js";
import {
  type CpuMeter,
  type Freezer,
  type RuntimeDriver,
  type RuntimeInfo,
  RuntimeUnavailableError,
  type SandboxLaunch,
  type SandboxStats,
  type Suspender,
} from "../driver.js";
import { ConsoleGuard } from "./console-guard.js";
import { imageBytes, isCompleteImage } from "./image.js";
import { ociSpec } from "./oci-spec.js";
import { formatOverlayDisk, OverlayDisks } from "./overlay-disk.js";
import {
  chooseFaster,
  LOOP,
  noPlatformMessage,
  PLATFORMS,
  type PlatformTrial,
  recordPlatform,
} from "./platform-choice.js";
import { probeKey, rememberedPlatform, rememberPlatform } from "./probe-memo.js";
import { Runsc } from "./runsc.js";

export interface GvisorOptions {
  binary?: string;
  stateDir: string;
  /** systrap | ptrace | auto (platform-choice.ts) */
  platform?: string;
  /** With auto: where the data dir records the platform it uses, and what it must keep (pinnedPlatform). */
  platformRecord?: string;
  platformPin?: { candidates: string[]; why: string };
  /** Bound each sandbox's writable layer by its diskSizeMB (overlay-disk.ts). */
  enforceDiskSize?: boolean;
  /** Where disks are formatted ahead of starts (on the sandboxes' filesystem); unset: each start formats its own. */
  disksDir?: string;
  /** runsc debug logs go here (see RunscConfig.debugLogDir). */
  debugLogDir?: string;
  /** A sandbox's console file is emptied past this many bytes (console-guard.ts); 0: unbounded. */
  maxConsoleBytes?: number;
  /** Held on a sandbox's rootfs while runsc opens it: a tree may be swapped in place (lazy-settle.ts). */
  rootfsGate?: PathGate;
  log: Logger;
}

/** cgroup v2 only (unified hierarchy at the root); v1 and hybrid hosts have per-controller trees. */
const CGROUP_V2 = existsSync("/sys/fs/cgroup/cgroup.controllers");

export class GvisorDriver implements RuntimeDriver, Freezer, Suspender, CpuMeter {
  readonly name = "gvisor";
  readonly quiesceBeforeCheckpoint = true;
  // The cgroup freezer, runsc's own pause, and the cgroup's CPU accounting.
  readonly freezer: Freezer = this;
  readonly suspender: Suspender = this;
  readonly cpuMeter: CpuMeter = this;
  private runsc: Runsc;
  private readonly lastCpu = new Map<string, { t: number; ns: number }>();
  /** Sandbox disks formatted ahead (with enforceDiskSize and disksDir). */
  readonly disks?: OverlayDisks;
  private readonly consoles: ConsoleGuard;

  constructor(private readonly opts: GvisorOptions) {
    this.consoles = new ConsoleGuard(opts.maxConsoleBytes ?? 8 * 1024 * 1024, opts.log);
    if (opts.debugLogDir) mkdirSync(opts.debugLogDir, { recursive: true, mode: 0o700 });
    if (opts.enforceDiskSize && opts.disksDir) this.disks = new OverlayDisks(opts.disksDir, opts.log);
    this.runsc = new Runsc({
      binary: opts.binary ?? "runsc",
      root: opts.stateDir,
      platform: "systrap",
      debugLogDir: opts.debugLogDir,
    });
  }

  async probe(): Promise<RuntimeInfo> {
    const bin = this.runsc.cfg.binary;
    let version: string;
    try {
      version = (await exec(bin, ["--version"])).stdout.split("\n")[0] ?? "";
    } catch (err) {
      throw new RuntimeUnavailableError(
        `runsc not found or not executable (${(err as Error).message}); run scripts/install-deps.sh`,
      );
    }
    const m = /version (\S+)/.exec(version);
    if (m?.[1] && m[1] < "0.0~2024") {
      throw new RuntimeUnavailableError(
        `runsc ${m[1]} is too old (bookworm's build breaks coreutils and netstack); install bookworm-backports runsc`,
      );
    }
    mkdirSync(this.opts.stateDir, { recursive: true });
    const wanted = this.opts.platform ?? "auto";
    const selected = (platform: string, remembered: boolean): RuntimeInfo => {
      this.runsc = new Runsc({ ...this.runsc.cfg, platform });
      this.opts.log.info({ platform, version, remembered }, "gVisor platform selected");
      if (wanted === "auto" && this.opts.platformRecord) recordPlatform(this.opts.platformRecord, platform);
      const v = m?.[1] ?? version;
      return {
        driver: this.name,
        version: v,
        platform,
        checkpointKey: `${v.replace(/[^a-zA-Z0-9.]/g, "")}-${platform}`,
      };
    };
    const pin = wanted === "auto" ? this.opts.platformPin : undefined;
    if (wanted === "auto" && !pin) return this.measured(version, selected);
    const candidates = pin?.candidates ?? [wanted];
    if (pin) this.opts.log.info({ candidates, why: pin.why }, "gVisor platform kept for this data dir");
    const key = probeKey(bin, `${version}\0${candidates.join(",")}`);
    const known = rememberedPlatform(key, candidates);
    if (known) return selected(known, true);
    const failed: PlatformTrial[] = [];
    for (const platform of candidates) {
      const t = await this.trial(platform, false);
      if (t.ok) {
        rememberPlatform(key, platform);
        return selected(platform, false);
      }
      failed.push(t);
    }
    throw new RuntimeUnavailableError(noPlatformMessage(failed));
  }

  /** `auto` on a data dir with no platform yet: each platform tried and timed, the faster kept. */
  private async measured(version: string, selected: (p: string, remembered: boolean) => RuntimeInfo) {
    const key = probeKey(this.runsc.cfg.binary, `${version}\0auto-measured`);
    const known = rememberedPlatform(key, [...PLATFORMS]);
    if (known) return selected(known, true);
    const trials: PlatformTrial[] = [];
    for (const platform of PLATFORMS) trials.push(await this.trial(platform, true));
    const chosen = chooseFaster(trials);
    if (!chosen) throw new RuntimeUnavailableError(noPlatformMessage(trials));
    this.opts.log.info({ trials, chosen }, "gVisor platforms measured");
    rememberPlatform(key, chosen);
    return selected(chosen, false);
  }

  /** A throwaway sandbox on `platform` (`runsc do`), and with `timed` a loop of fork+exec in another. */
  private async trial(platform: string, timed: boolean): Promise<PlatformTrial> {
    const args = [`--root=${this.opts.stateDir}/probe`, `--platform=${platform}`, "--network=none", "do"];
    const bin = this.runsc.cfg.binary;
    const t0 = performance.now();
    const r = await exec(bin, [...args, "/bin/true"], { allowFail: true, timeoutMs: 30_000 });
    const startMs = Math.round(performance.now() - t0);
    if (r.code !== 0) return { platform, ok: false, error: r.stderr.trim().split("\n").pop() ?? `exit ${r.code}` };
    if (!timed) return { platform, ok: true, startMs };
    const t1 = performance.now();
    const l = await exec(bin, [...args, "/bin/sh", "-c", LOOP], { allowFail: true, timeoutMs: 60_000 });
    const loopMs = Math.max(0, Math.round(performance.now() - t1) - startMs);
    return { platform, ok: true, startMs, ...(l.code === 0 ? { loopMs } : {}) };
  }

  get platform(): string {
    return this.runsc.cfg.platform;
  }

  private async bundle(
    l: SandboxLaunch,
  ): Promise<{ bundle: string; flags: string[]; disk?: { image: string; dir: string } }> {
    const bundle = join(l.dir, "bundle");
    const overlay = join(l.dir, "overlay");
    mkdirSync(bundle, { recursive: true });
    mkdirSync(overlay, { recursive: true });
    writeFileSync(join(bundle, "config.json"), JSON.stringify(ociSpec(l)));
    // --net-disconnect-ok: a checkpoint drops external TCP connections instead of failing.
    const overlayFlag = l.writableRootfs ? "--overlay2=none" : `--overlay2=root:dir=${overlay}`;
    const flags = ["--network=sandbox", overlayFlag, "--net-disconnect-ok"];
    if (l.writableRootfs || !l.diskSizeMB || !this.opts.enforceDiskSize) return { bundle, flags };
    const image = join(l.dir, "disk.img");
    const t0 = Date.now();
    if (this.disks) await this.disks.take(image, l.diskSizeMB);
    else await formatOverlayDisk(image, l.diskSizeMB);
    this.opts.log.debug({ sandboxID: l.id, ms: Date.now() - t0, mb: l.diskSizeMB }, "sandbox disk ready");
    return { bundle, flags, disk: { image, dir: overlay } };
  }

  async start(l: SandboxLaunch): Promise<void> {
    const { bundle, flags, disk } = await this.bundle(l);
    const args = ["run", "--detach", `--bundle=${bundle}`, l.id];
    this.consoles.watch(l.id, join(l.dir, "runsc.log"));
    await this.holdingRootfs(l, () =>
      this.runsc.detached(flags, args, join(l.dir, "runsc.log"), {
        disk,
        lowPriority: l.lowPriority,
        rootfs: l.rootfs,
      }),
    );
  }

  private holdingRootfs<T>(l: SandboxLaunch, fn: () => Promise<T>): Promise<T> {
    return this.opts.rootfsGate ? this.opts.rootfsGate.shared(l.rootfs, fn) : fn();
  }

  isCompleteCheckpoint(imageDir: string | undefined): boolean {
    return isCompleteImage(imageDir);
  }

  checkpointBytes(imageDir: string): number {
    return imageBytes(imageDir);
  }

  async checkpoint(id: string, imageDir: string, opts: { leaveRunning: boolean }): Promise<void> {
    const args = ["checkpoint", "--compression=none", `--image-path=${imageDir}`];
    if (opts.leaveRunning) args.push("--leave-running");
    await this.runsc.run(["--net-disconnect-ok", ...args, id], { timeoutMs: 120_000 });
  }

  /** `runsc pause`: the sentry stops every task (a checkpoint of it, leaving it running, keeps it paused). */
  async suspend(id: string): Promise<void> {
    await this.runsc.run(["pause", id], { timeoutMs: 30_000 });
  }

  async unsuspend(id: string): Promise<void> {
    await this.runsc.run(["resume", id], { timeoutMs: 30_000 });
  }

  /** From runsc's own state file (no `runsc state` process). */
  isSuspended(id: string): boolean {
    return this.stateFile(id)?.status === "paused";
  }

  async restore(l: SandboxLaunch, imageDir: string): Promise<void> {
    const { bundle, flags, disk } = await this.bundle(l);
    this.consoles.watch(l.id, join(l.dir, "runsc.log"));
    await this.holdingRootfs(l, () =>
      this.runsc.detached(
        flags,
        ["restore", "--detach", `--image-path=${imageDir}`, `--bundle=${bundle}`, l.id],
        join(l.dir, "runsc.log"),
        { timeoutMs: 120_000, disk, lowPriority: l.lowPriority, rootfs: l.rootfs },
      ),
    );
  }

  /**
   * Every thread of the sandbox (sentry, gofer, systrap stubs: all in its cgroup) back to
   * nice 0. setpriority(2) takes thread IDs one at a time: a process-wide renice would leave
   * the sentry's other threads low. Threads made later inherit from these.
   */
  async prioritize(id: string): Promise<void> {
    let tids: string[];
    try {
      tids = readFileSync(this.cgroup("freezer", id, "tasks", "cgroup.threads"), "utf8").split("\n");
    } catch {
      return;
    }
    for (const t of tids) {
      const tid = Number(t);
      if (!Number.isInteger(tid) || tid <= 1) continue;
      try {
        setPriority(tid, 0);
      } catch {
        // The thread ended meanwhile.
      }
    }
  }

  /** runsc's own state file of a sandbox (what `runsc state` reads); undefined if unreadable. */
  private stateFile(id: string): { status?: unknown; sandbox?: { pid?: unknown } } | undefined {
    try {
      return JSON.parse(readFileSync(join(this.opts.stateDir, `${id}_sandbox:${id}.state`), "utf8"));
    } catch {
      return undefined;
    }
  }

  /**
   * The sandbox process's PID from runsc's own state file, checked against /proc (a PID
   * the kernel reused for something else is never taken): no `runsc state` process to
   * start, which costs ~50 ms here on every pause and kill. Undefined when in doubt.
   */
  private sandboxPid(id: string): number | undefined {
    try {
      const pid = this.stateFile(id)?.sandbox?.pid;
      if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 1) return undefined;
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      return argv[0]?.includes("runsc") && argv.includes(id) ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  /** SIGKILL to the sandbox process: immediate, where `runsc delete` takes 1-2 s here. */
  async stop(id: string): Promise<void> {
    // Frozen tasks (cgroup v1) do not die until thawed.
    await this.thaw(id).catch(() => {});
    const known = this.sandboxPid(id);
    if (known) {
      try {
        process.kill(known, "SIGKILL");
        return;
      } catch {
        // Gone meanwhile: ask runsc below.
      }
    }
    const r = await this.runsc.run(["state", id], { allowFail: true });
    if (r.code !== 0) return;
    try {
      const pid = (JSON.parse(r.stdout) as { pid?: number }).pid;
      if (pid && pid > 1) process.kill(pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }

  /** The sandbox's cgroup (runsc makes it from the spec's cgroupsPath), v1 or v2 layout. */
  private cgroup(controller: "freezer" | "cpuacct" | "memory", id: string, v1File: string, v2File: string): string {
    return CGROUP_V2 ? `/sys/fs/cgroup/aenv/${id}/${v2File}` : `/sys/fs/cgroup/${controller}/aenv/${id}/${v1File}`;
  }

  /** The cgroup freezer: sentry, gofer and systrap stubs stop at once, no checkpoint taken. */
  async freeze(id: string): Promise<void> {
    const file = this.cgroup("freezer", id, "freezer.state", "cgroup.freeze");
    writeFileSync(file, CGROUP_V2 ? "1" : "FROZEN");
    const frozen = () =>
      CGROUP_V2
        ? /^frozen 1$/m.test(readFileSync(this.cgroup("freezer", id, "", "cgroup.events"), "utf8"))
        : readFileSync(file, "utf8").trim() === "FROZEN";
    for (let i = 0; i < 200; i++) {
      if (frozen()) return;
      await new Promise((r) => setTimeout(r, 5));
    }
    writeFileSync(file, CGROUP_V2 ? "0" : "THAWED");
    throw new Error(`sandbox ${id} did not freeze`);
  }

  async thaw(id: string): Promise<void> {
    try {
      writeFileSync(this.cgroup("freezer", id, "freezer.state", "cgroup.freeze"), CGROUP_V2 ? "0" : "THAWED");
    } catch (err) {
      // No cgroup: the sandbox is gone, nothing is frozen.
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }

  cpuTimeNs(id: string): number | undefined {
    try {
      if (!CGROUP_V2) return Number(readFileSync(this.cgroup("cpuacct", id, "cpuacct.usage", ""), "utf8"));
      const m = /^usage_usec (\d+)$/m.exec(readFileSync(this.cgroup("cpuacct", id, "", "cpu.stat"), "utf8"));
      return m ? Number(m[1]) * 1000 : undefined;
    } catch {
      return undefined;
    }
  }

  consoleFile(runDir: string): string {
    return join(runDir, "runsc.log");
  }

  async destroy(id: string): Promise<void> {
    this.lastCpu.delete(id);
    this.consoles.forget(id);
    await this.thaw(id).catch(() => {});
    await this.runsc.run(["delete", "--force", id], { allowFail: true });
  }

  /**
   * Whether the sandbox process is alive, from its state file and /proc. Not `runsc state` or
   * `runsc list --format=json`: they ask the sandbox itself and hang while it is frozen
   * (hibernated or pooled), and each costs a runsc process.
   */
  private alive(id: string): boolean {
    const pid = this.sandboxPid(id);
    if (!pid) return false;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      return state !== "Z" && state !== "X";
    } catch {
      return false;
    }
  }

  async isRunning(id: string): Promise<boolean> {
    return this.alive(id);
  }

  /**
   * CPU and memory from the sandbox's cgroup: sentry, gofer and workload together, what the
   * sandbox costs the host. Not `runsc events --stats`: that started a runsc process per sample
   * (~30 ms of host CPU, every sandbox every metrics interval) and asked the sandbox itself.
   * Memory in use leaves out inactive file pages, as `docker stats` does.
   */
  async stats(id: string): Promise<SandboxStats | undefined> {
    const ns = this.cpuTimeNs(id);
    const mem = this.memoryUsage(id);
    if (ns === undefined || !mem) return undefined;
    const now = Date.now();
    const prev = this.lastCpu.get(id);
    this.lastCpu.set(id, { t: now, ns });
    const cpuUsedPct = prev && now > prev.t ? Math.max(0, ((ns - prev.ns) / 1e6 / (now - prev.t)) * 100) : 0;
    return { cpuUsedPct, memUsedBytes: mem.used, memCacheBytes: mem.cache };
  }

  private memoryUsage(id: string): { used: number; cache: number } | undefined {
    try {
      const stat = readFileSync(this.cgroup("memory", id, "memory.stat", "memory.stat"), "utf8");
      const field = (key: string) => Number(new RegExp(`^${key} (\\d+)$`, "m").exec(stat)?.[1] ?? 0);
      const usage = Number(readFileSync(this.cgroup("memory", id, "memory.usage_in_bytes", "memory.current"), "utf8"));
      const inactive = CGROUP_V2 ? field("inactive_file") : field("total_inactive_file");
      const cache = CGROUP_V2 ? field("file") : field("total_cache");
      return Number.isFinite(usage) ? { used: Math.max(0, usage - inactive), cache } : undefined;
    } catch {
      return undefined;
    }
  }

  async list(opts: { runningOnly?: boolean } = {}): Promise<string[]> {
    // A failed list must not read as "nothing runs": callers kill what is missing from it.
    // -quiet reads the state folder only; the JSON form asks every sandbox and hangs on frozen ones.
    const r = await this.runsc.run(["list", "-quiet"], { allowFail: true });
    if (r.code !== 0) throw new Error(`runsc list failed: ${r.stderr.trim() || `exit ${r.code}`}`);
    const ids = r.stdout
      .split("\n")
      .map((l) => l.trim())
      .filter(Boolean);
    return opts.runningOnly ? ids.filter((id) => this.alive(id)) : ids;
  }
}
