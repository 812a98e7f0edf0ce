/**
 * The raw gVisor baseline: plain `runsc` driven from the CLI with a minimal OCI bundle over
 * the same template rootfs aenv uses, no aenv server, no envd, no network namespace setup.
 *
 * - rootfs: the template's rootfs, shared by every raw sandbox; runsc's overlay
 *   (`--overlay2=root:memory`) takes all writes in memory, so the tree on disk is untouched.
 *   (`overlay: "dir"` puts the upper layer in a file under the bundle instead, as aenv does.)
 * - `--network=none` (loopback only), process `/bin/sleep infinity`, started with
 *   `run --detach` whose stdio goes to a log file (a detached runsc keeps it open for the
 *   sandbox's life, so never a pipe we would wait on).
 * - cgroups are KEPT, with the limits aenv gives a `base` sandbox (1 GiB, 2 CPUs, 4096
 *   pids), under a private parent `/aenv-bench-<pid>/<id>` that is removed afterwards.
 * - every sandbox gets a fresh fixed-length id (runsc matches ids by prefix) and all state
 *   lives in a private `--root` dir; `runsc delete --force` afterwards.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { CAPS, STANDARD_MOUNTS } from "../packages/server/src/runtime/gvisor/oci-spec.js";

export interface RawRunscOptions {
  rootfs: string;
  binary?: string;
  platform?: string;
  memoryMB?: number;
  cpuCount?: number;
  /** "memory" (runsc's default, the baseline) or "dir": a file-backed upper in the bundle, as aenv uses. */
  overlay?: "memory" | "dir";
}

export interface ExecResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

export class RawRunsc {
  readonly binary: string;
  readonly platform: string;
  readonly workDir: string;
  readonly stateDir: string;
  private readonly cgroupParent = `aenv-bench-${process.pid}`;
  private readonly live = new Set<string>();

  constructor(private readonly opts: RawRunscOptions) {
    this.binary = opts.binary ?? "runsc";
    this.platform = opts.platform ?? "systrap";
    this.workDir = mkdtempSync("/var/tmp/aenv-bench-raw-");
    this.stateDir = join(this.workDir, "state");
    mkdirSync(this.stateDir);
    mkdirSync(join(this.workDir, "bundles"));
  }

  /** "r" + 20 lowercase alphanumerics: the same fixed length as aenv's ids. */
  newId(): string {
    let s = "r";
    for (const b of randomBytes(20)) s += ID_ALPHABET[b % ID_ALPHABET.length];
    return s;
  }

  spec(id: string): Record<string, unknown> {
    const memoryMB = this.opts.memoryMB ?? 1024;
    const cpuCount = this.opts.cpuCount ?? 2;
    return {
      ociVersion: "1.0.2",
      process: {
        terminal: false,
        user: { uid: 0, gid: 0 },
        args: ["/bin/sleep", "infinity"],
        env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"],
        cwd: "/",
        capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS, inheritable: CAPS, ambient: [] },
        rlimits: [{ type: "RLIMIT_NOFILE", hard: 1048576, soft: 1048576 }],
        noNewPrivileges: false,
      },
      // Not readonly inside the sandbox: the memory overlay absorbs every write.
      root: { path: this.opts.rootfs, readonly: false },
      hostname: "raw",
      mounts: STANDARD_MOUNTS,
      linux: {
        namespaces: [{ type: "pid" }, { type: "ipc" }, { type: "uts" }, { type: "mount" }, { type: "network" }],
        resources: {
          memory: { limit: memoryMB * 1024 * 1024 },
          cpu: { quota: Math.round(cpuCount * 100000), period: 100000 },
          pids: { limit: 4096 },
        },
        cgroupsPath: `/${this.cgroupParent}/${id}`,
      },
    };
  }

  /**
   * Writes the bundle of `id` and runs a detached `runsc` subcommand on it (`run` or
   * `restore`); stdio goes to a log file, since a detached runsc keeps it open.
   */
  private async detached(id: string, subcommand: string[], timeoutMs: number): Promise<void> {
    const bundle = join(this.workDir, "bundles", id);
    mkdirSync(bundle);
    writeFileSync(join(bundle, "config.json"), JSON.stringify(this.spec(id)));
    let overlay = "--overlay2=root:memory";
    if (this.opts.overlay === "dir") {
      mkdirSync(join(bundle, "overlay"));
      overlay = `--overlay2=root:dir=${join(bundle, "overlay")}`;
    }
    const log = join(bundle, "runsc.log");
    const fd = openSync(log, "a");
    this.live.add(id);
    let child: ChildProcess;
    try {
      child = spawn(
        this.binary,
        [
          `--root=${this.stateDir}`,
          `--platform=${this.platform}`,
          "--network=none",
          overlay,
          ...subcommand,
          "--detach",
          `--bundle=${bundle}`,
          id,
        ],
        { stdio: ["ignore", fd, fd] },
      );
    } finally {
      closeSync(fd);
    }
    const { code, signal } = await waitExit(child, timeoutMs);
    if (code !== 0) throw new Error(`runsc ${subcommand[0]} ${id} exited with ${code ?? signal}; see ${log}`);
  }

  /** Writes the bundle and starts `sleep infinity` detached; resolves once `run --detach` returns. */
  start(id: string, timeoutMs = 60_000): Promise<void> {
    return this.detached(id, ["run"], timeoutMs);
  }

  /** `runsc exec <id> args…`, optionally feeding stdin; stdout comes back as bytes. */
  async exec(id: string, args: string[], opts: { stdin?: Buffer; timeoutMs?: number } = {}): Promise<ExecResult> {
    const child = spawn(this.binary, [`--root=${this.stateDir}`, "exec", id, ...args], {
      stdio: [opts.stdin ? "pipe" : "ignore", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    let err = "";
    child.stdout?.on("data", (d: Buffer) => out.push(d));
    child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
    if (opts.stdin) {
      child.stdin?.on("error", () => {}); // surfaced through the exit code
      child.stdin?.end(opts.stdin);
    }
    const { code, signal } = await waitExit(child, opts.timeoutMs ?? 60_000);
    const res = { code, stdout: Buffer.concat(out), stderr: err };
    if (code !== 0) throw new Error(`runsc exec ${id} ${args.join(" ")} exited with ${code ?? signal}: ${err.trim()}`);
    return res;
  }

  /** `runsc checkpoint --compression=none` into imageDir (which must exist). */
  async checkpoint(id: string, imageDir: string, leaveRunning: boolean): Promise<void> {
    const args = [`--root=${this.stateDir}`, "checkpoint", "--compression=none", `--image-path=${imageDir}`];
    if (leaveRunning) args.push("--leave-running");
    const child = spawn(this.binary, [...args, id], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
    const { code, signal } = await waitExit(child, 300_000);
    if (code !== 0)
      throw new Error(`runsc checkpoint ${id} exited with ${code ?? signal}: ${err.trim().split("\n")[0]}`);
  }

  /** `runsc restore --detach` of an image as a new sandbox `id` (same bundle shape as start()). */
  restore(id: string, imageDir: string, timeoutMs = 300_000): Promise<void> {
    return this.detached(id, ["restore", `--image-path=${imageDir}`], timeoutMs);
  }

  /** `runsc pause` (every task stopped in place, memory kept). */
  pause(id: string): Promise<void> {
    return this.simple(["pause", id]);
  }

  /** `runsc resume` of a paused sandbox. */
  resume(id: string): Promise<void> {
    return this.simple(["resume", id]);
  }

  private async simple(args: string[]): Promise<void> {
    const child = spawn(this.binary, [`--root=${this.stateDir}`, ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
    const { code, signal } = await waitExit(child, 60_000);
    if (code !== 0) throw new Error(`runsc ${args.join(" ")} exited with ${code ?? signal}: ${err.trim()}`);
  }

  async delete(id: string): Promise<void> {
    const child = spawn(this.binary, [`--root=${this.stateDir}`, "delete", "--force", id], { stdio: "ignore" });
    await waitExit(child, 30_000).catch(() => {});
    this.live.delete(id);
  }

  liveIds(): string[] {
    return [...this.live];
  }

  /** Deletes every sandbox this instance started, its state dir and its cgroup parent. */
  async cleanup(): Promise<void> {
    for (const id of [...this.live]) await this.delete(id);
    rmSync(this.workDir, { recursive: true, force: true });
    removeCgroupParent(this.cgroupParent);
  }
}

function waitExit(
  child: ChildProcess,
  timeoutMs: number,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}

/** Best effort: the empty parent cgroup runsc leaves behind (v1: one per controller; v2: one). */
function removeCgroupParent(name: string): void {
  const base = "/sys/fs/cgroup";
  const dirs = [join(base, name)];
  try {
    for (const c of readdirSync(base)) dirs.push(join(base, c, name));
  } catch {
    return;
  }
  for (const d of dirs) {
    if (!existsSync(d)) continue;
    try {
      rmdirSync(d);
    } catch {
      // busy or already gone
    }
  }
}
