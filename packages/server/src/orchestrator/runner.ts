import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { ENVD_HEAP_REDUCE_PATH, ENVD_QUIESCE_PATH, type EnvdInitBody } from "@aenv/protocol";
import type { Logger } from "pino";
import { compileEgress } from "../network/policy.js";
import type { Slot, SlotAllocator } from "../network/slots.js";
import type { NodePaths } from "../node-paths.js";
import type { RuntimeDriver, SandboxLaunch } from "../runtime/driver.js";
import { Semaphore } from "../util/concurrency.js";
import { trustEgressCa } from "./egress-trust.js";
import { envdRequest, holdEnvd, waitForEnvd } from "./envd-client.js";
import { envdHostToken, envdTokenOf } from "./envd-credentials.js";
import type { Live, SandboxRegistry } from "./registry.js";
import type { SandboxStates } from "./sandbox-states.js";

/** Where a sandbox's memory and processes come from when it starts. */
export type StartFrom = { kind: "boot" } | { kind: "image"; imageDir: string; oldToken?: string };

/** envd's /init body: token, environment, default user and folder (the time is added here). */
export type EnvdInit = Omit<EnvdInitBody, "timestamp">;

export interface CaptureOptions {
  /**
   * Many sandboxes start from the image at once or over and over (fork children, a
   * template's warm image): envd collects its garbage first, so that pending V8 work is done
   * once and not in every copy (fork x16: 5.2-7.4 -> 3.2-4.2 s here). Costs 40-60 ms, so a
   * pause or snapshot, which one sandbox at a time resumes, goes without.
   */
  shared?: boolean;
  /**
   * Hibernation's save: refused (NotIdleError, nothing captured) while a process in the
   * sandbox has a TCP connection to outside it, which runsc would reset in the save (and
   * which its client would see break); such a sandbox stays frozen in memory instead.
   */
  unlessExternalTcp?: boolean;
}

/** A capture refused because the sandbox is in touch with the outside (see unlessExternalTcp). */
export class NotIdleError extends Error {}

// Generous: idle systrap sandboxes burn CPU, so a busy 2-core node can take a while.
const ENVD_READY_TIMEOUT_MS = 60_000;

/** Runtime IDs: the sandbox ID plus a per-start suffix, fixed length (runsc matches prefixes). */
export function runtimeIdFor(sandboxId: string): string {
  return `${sandboxId}-${randomBytes(3).toString("hex")}`;
}

export interface RunnerDeps {
  driver: RuntimeDriver;
  slots: SlotAllocator;
  /** Where state changes and records are persisted (sandbox-states.ts). */
  states: SandboxStates;
  registry: SandboxRegistry;
  paths: NodePaths;
  resolvConf: string;
  /** Host folder of a volume, by ID. */
  volumeRoot: (volumeId: string) => string;
  /** Sandboxes booting or restoring at once. */
  startConcurrency: number;
  /** The egress proxy's CA, trusted by sandboxes whose rules transform HTTPS requests. */
  egressCa?: { certPem: string; fingerprint: string };
  log: Logger;
}

/**
 * Brings sandboxes up and down: a network slot, the runtime driver, envd ready and
 * initialised; and captures (quiesce, then checkpoint). Removal of a stopped runtime sandbox
 * finishes in the background, tracked so a resume or a shutdown can wait for it.
 */
export class SandboxRunner {
  private readonly stoppedListeners: Array<(id: string) => void> = [];
  /** Runtime removals still running in the background, by runtime ID. */
  private readonly cleanups = new Map<string, Promise<void>>();

  private readonly starts: Semaphore;
  /** Starts callers wait for, in flight, and when the last one ended (quietFor). */
  private foreground = 0;
  private foregroundEndedAt = 0;

  constructor(private readonly d: RunnerDeps) {
    this.starts = new Semaphore(Math.max(1, d.startConcurrency));
  }

  get driver(): RuntimeDriver {
    return this.d.driver;
  }

  /** Called whenever a sandbox stops running or is captured (the proxy drops its connections). */
  onStopped(fn: (id: string) => void): void {
    this.stoppedListeners.push(fn);
  }

  private notifyStopped(id: string): void {
    for (const fn of this.stoppedListeners) fn(id);
  }

  private launch(live: Live, slot: Slot): SandboxLaunch {
    const { rec } = live;
    return {
      ...live.launchExtras,
      id: rec.runtimeId,
      rootfs: rec.rootfs,
      dir: this.d.paths.sandboxRun(rec.dir, rec.runtimeId),
      netnsPath: slot.netnsPath,
      envdAddress: slot.slotIp,
      cpuCount: rec.cpuCount,
      memoryMB: rec.memoryMB,
      diskSizeMB: rec.diskSizeMB,
      hostname: "aenv",
      runtimeDir: rec.runtimeDir,
      resolvConf: this.d.resolvConf,
      volumeMounts: (rec.volumeMounts ?? []).map((m) => ({
        destination: m.path,
        source: this.d.volumeRoot(m.volumeId),
      })),
    };
  }

  /** No start for a caller (create, resume, fork child, build) in flight, nor in the last `ms`. */
  quietFor(ms: number): boolean {
    return this.foreground === 0 && Date.now() - this.foregroundEndedAt >= ms;
  }

  /**
   * Gets a sandbox running in a fresh slot, booted or restored, and waits for envd. With an
   * init body, envd is (re)initialised: new token, env, user (the old token authorises it).
   * `background`: nobody waits for it (the warm pool's restores), see quietFor; it runs at
   * the lowest CPU priority until the driver's prioritize() (a claim).
   */
  async bring(live: Live, from: StartFrom, init: EnvdInit | undefined, background = false): Promise<void> {
    if (background) return this.bringNow(live, from, init, true);
    this.foreground++;
    try {
      await this.bringNow(live, from, init, false);
    } finally {
      this.foreground--;
      this.foregroundEndedAt = Date.now();
    }
  }

  private async bringNow(live: Live, from: StartFrom, init: EnvdInit | undefined, background: boolean): Promise<void> {
    const { rec } = live;
    // Each start is a new runtime sandbox: the previous one may still be being removed.
    rec.runtimeId = runtimeIdFor(rec.id);
    mkdirSync(rec.dir, { recursive: true });
    const t0 = Date.now();
    live.slot = await this.d.slots.acquire(compileEgress(rec.network, rec.allowInternet));
    const t1 = Date.now();
    let t2 = t1;
    rec.slotIndex = live.slot.index;
    if (!live.ephemeral) this.d.states.save(rec);
    const launch = { ...this.launch(live, live.slot), ...(background ? { lowPriority: true } : {}) };
    const ip = live.slot.slotIp;
    // Starts are CPU-bound: a burst (100 creates, a big fork) queues here instead of thrashing
    // until envd misses its deadline.
    await this.starts.run(async () => {
      if (from.kind === "boot") await this.d.driver.start(launch);
      else await this.d.driver.restore(launch, from.imageDir);
      t2 = Date.now();
      await waitForEnvd(ip, ENVD_READY_TIMEOUT_MS, () => this.d.driver.isRunning(rec.runtimeId));
    });
    this.d.log.debug(
      {
        sandboxID: rec.id,
        from: from.kind,
        slot: live.slot?.index,
        slotMs: t1 - t0,
        startMs: t2 - t1,
        envdMs: Date.now() - t2,
      },
      "runtime started",
    );
    if (init) await this.initEnvd(live, init, from.kind === "image" ? from.oldToken : undefined);
    else await this.ensureEgressTrust(live);
  }

  /** Puts the record's network policy on the slot the sandbox already has. */
  async applyNetwork(live: Live): Promise<void> {
    if (!live.slot) throw new Error("sandbox has no network slot");
    await this.d.slots.applyPolicy(live.slot, compileEgress(live.rec.network, live.rec.allowInternet));
  }

  /** envd's /init: the sandbox's token, env and user (oldToken authorises a re-init). */
  async initEnvd(live: Live, init: EnvdInit, oldToken: string | undefined): Promise<void> {
    if (!live.slot) throw new Error("sandbox has no network slot");
    // The client's token never enters the sandbox: envd is given the host token derived from it.
    const body: EnvdInitBody = {
      ...init,
      ...(init.accessToken !== undefined ? { accessToken: envdHostToken(init.accessToken) } : {}),
      timestamp: new Date().toISOString(),
    };
    // envd already answered its health check: a slow /init is a starved host (a burst of
    // restores on few cores: 5 s was exceeded in CI), not a dead envd, so it gets longer.
    const r = await envdRequest(live.slot.slotIp, "POST", "/init", { body, token: oldToken, timeoutMs: 30_000 });
    if (r.status >= 300) throw new Error(`envd /init answered ${r.status}: ${r.body}`);
    if (init.accessToken !== undefined) {
      live.rec.envdCredential = "host";
      if (!live.ephemeral) this.d.states.save(live.rec);
    }
    await this.ensureEgressTrust(live);
  }

  /**
   * Installs the egress CA in a running sandbox whose rules need it, once per CA (a sandbox
   * resumed on a node with another CA gets that one too). Files persist in pauses and captures.
   */
  async ensureEgressTrust(live: Live): Promise<void> {
    const { rec } = live;
    const ca = this.d.egressCa;
    if (!ca || !live.slot || Object.keys(rec.network?.rules ?? {}).length === 0) return;
    if (rec.egressCa === ca.fingerprint) return;
    await trustEgressCa(live.slot.slotIp, envdTokenOf(rec), ca.certPem);
    rec.egressCa = ca.fingerprint;
    if (!live.ephemeral) this.d.states.save(rec);
  }

  /**
   * Stops the runtime sandbox now; removing it (runtime state, slot reset, optionally the
   * sandbox folder) finishes in the background.
   */
  async stopRuntime(live: Live, removeDir = false): Promise<void> {
    const id = live.rec.runtimeId;
    const slot = live.slot;
    const dir = removeDir ? live.rec.dir : this.d.paths.sandboxRun(live.rec.dir, id);
    this.notifyStopped(live.rec.id);
    // Its address goes back to the pool: no later sandbox there may find it held.
    live.suspended?.release();
    live.suspended = undefined;
    live.slot = undefined;
    live.rec.slotIndex = null;
    await this.d.driver.stop(id).catch(() => {});
    const prev = this.cleanups.get(id) ?? Promise.resolve();
    const done = prev
      .then(() => this.d.driver.destroy(id))
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "runtime removal failed"))
      .then(async () => {
        if (slot) await this.d.slots.release(slot).catch(() => {});
        rmSync(dir, { recursive: true, force: true });
      })
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "sandbox folder not removed"))
      .finally(() => {
        if (this.cleanups.get(id) === done) this.cleanups.delete(id);
      });
    this.cleanups.set(id, done);
  }

  /** Stops it and removes its folder; with removeRecord, it is forgotten too. */
  async remove(live: Live, removeRecord: boolean): Promise<void> {
    await this.stopRuntime(live, true);
    if (removeRecord && !live.ephemeral) {
      this.d.states.forget(live.rec.id);
      this.d.registry.remove(live.rec.id);
    }
  }

  /** Resolves once the runtime sandbox is fully gone (its rootfs is free for other uses). */
  removed(runtimeId: string): Promise<void> {
    return this.cleanups.get(runtimeId) ?? Promise.resolve();
  }

  async allRemoved(): Promise<void> {
    await Promise.all([...this.cleanups.values()]);
  }

  /** Whether envd in a slot answers (recovery: is a sandbox that survived a restart usable?). */
  async answers(ip: string): Promise<boolean> {
    try {
      return (await envdRequest(ip, "GET", "/health", { timeoutMs: 2000 })).status === 204;
    } catch {
      return false;
    }
  }

  /**
   * Before a capture: connections into the sandbox are cut (the proxy's), and envd closes
   * its own, where the driver needs it (see RuntimeDriver.quiesceBeforeCheckpoint).
   */
  async quiesce(l: Live, token: string | undefined, opts: CaptureOptions = {}): Promise<void> {
    this.notifyStopped(l.rec.id);
    if (!l.slot || !this.d.driver.quiesceBeforeCheckpoint) return;
    // envd closes every other connection before it answers and this one (fd first, then the
    // FIN) right after: its end means nothing of envd's is open any more. A checkpoint that
    // catches one of envd's sockets open restores an envd that spins or never accepts again
    // (runsc resets the connection mid-save, see holdEnvd); capture() keeps new ones out.
    const q = new URLSearchParams();
    // envd gives back what V8 holds beyond its live objects (~3 MiB, ~80 ms in gVisor) where
    // the image is worth it: one many sandboxes restore, or an idle sandbox's saved memory.
    if (opts.shared || opts.unlessExternalTcp) q.set("gc", "1");
    if (opts.unlessExternalTcp) q.set("unlessExternalTcp", "1");
    const query = q.toString();
    const path = query ? `${ENVD_QUIESCE_PATH}?${query}` : ENVD_QUIESCE_PATH;
    const r = await envdRequest(l.slot.slotIp, "POST", path, {
      token,
      timeoutMs: 5000,
      closedWithinMs: 1000,
      holder: true,
    }).catch(() => undefined);
    if (opts.unlessExternalTcp && r?.status !== 204) {
      throw new NotIdleError(
        r?.status === 409 ? r.body : `envd did not confirm it is idle (${r?.status ?? "no answer"})`,
      );
    }
    if (r && r.status >= 300) {
      const slot = l.slot.index;
      this.d.log.warn(
        { sandboxID: l.rec.id, status: r.status, body: r.body.slice(0, 200), slot },
        "envd quiesce refused",
      );
    }
  }

  /**
   * Best effort, before an idle sandbox is frozen: envd gives back the memory its runtime
   * holds beyond its live objects, so the frozen sandbox keeps less (~3 MiB).
   */
  async reduceMemory(l: Live): Promise<void> {
    if (!l.slot) return;
    const t0 = Date.now();
    const r = await envdRequest(l.slot.slotIp, "POST", ENVD_HEAP_REDUCE_PATH, {
      token: envdTokenOf(l.rec),
      timeoutMs: 2000,
    }).catch(() => undefined);
    if (r?.status === 204) this.d.log.debug({ sandboxID: l.rec.id, ms: Date.now() - t0 }, "envd heap reduced");
    else this.d.log.debug({ sandboxID: l.rec.id, status: r?.status }, "envd heap not reduced");
  }

  /**
   * Stops the sandbox's tasks in place (the driver's suspender), quiesced as for a capture; envd's
   * address stays held until the sandbox runs again or is stopped (a suspended envd answers
   * nothing, and no connection of the server's may be open in it at the checkpoint after).
   */
  async suspend(l: Live): Promise<void> {
    const suspender = this.d.driver.suspender;
    if (!suspender) throw new Error(`the ${this.d.driver.name} runtime cannot suspend a sandbox`);
    let open!: () => void;
    l.gate = new Promise<void>((res) => (open = res));
    const release = l.slot ? await holdEnvd(l.slot.slotIp) : () => {};
    try {
      await this.quiesce(l, envdTokenOf(l.rec));
      await suspender.suspend(l.rec.runtimeId);
      l.suspended = { release };
    } catch (err) {
      release();
      throw err;
    } finally {
      l.gate = undefined;
      open();
    }
  }

  /**
   * A checkpoint of a quiesced (or suspended: it stays so) runtime sandbox into a fresh
   * imageDir, anything an earlier attempt left there removed first.
   */
  async checkpointInto(runtimeId: string, imageDir: string, leaveRunning = true): Promise<void> {
    rmSync(imageDir, { recursive: true, force: true });
    mkdirSync(imageDir, { recursive: true });
    await this.d.driver.checkpoint(runtimeId, imageDir, { leaveRunning });
  }

  /** A suspended sandbox goes on where it stopped. */
  async unsuspend(l: Live): Promise<void> {
    await this.d.driver.suspender?.unsuspend(l.rec.runtimeId);
    l.suspended?.release();
    l.suspended = undefined;
  }

  /**
   * Checkpoints a sandbox (by default one that keeps running): proxied traffic waits at the
   * gate meanwhile, and the orchestrator's own envd calls end before it and fail fast during
   * it (holdEnvd: a connection open in envd at the checkpoint can break the image).
   */
  async capture(l: Live, imageDir: string, opts: CaptureOptions & { leaveRunning?: boolean } = {}): Promise<void> {
    let open!: () => void;
    l.gate = new Promise<void>((res) => (open = res));
    const release = l.slot ? await holdEnvd(l.slot.slotIp) : () => {};
    try {
      const t0 = Date.now();
      await this.quiesce(l, envdTokenOf(l.rec), opts);
      const t1 = Date.now();
      await this.checkpointInto(l.rec.runtimeId, imageDir, opts.leaveRunning ?? true);
      this.d.log.debug({ sandboxID: l.rec.id, quiesceMs: t1 - t0, checkpointMs: Date.now() - t1 }, "captured");
    } finally {
      release();
      l.gate = undefined;
      open();
    }
  }
}
