import { spawn } from "node:child_process";
import { closeSync, openSync, realpathSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { type ExecResult, exec } from "../../util/exec.js";
import { LAZYFS_NAME } from "../../util/mounts.js";

export interface RunscConfig {
  binary: string;
  /** runsc state root (one per server data dir). */
  root: string;
  platform: string;
  /**
   * Where runsc writes debug logs (runtime.debug_log): off by default. Needed by `runsc debug
   * --strace` on a live sandbox; the logs hold each sandbox's spec, env vars included.
   */
  debugLogDir?: string;
}

/** Thin wrapper over the runsc CLI: global flags in one place. */
export class Runsc {
  constructor(readonly cfg: RunscConfig) {}

  globalFlags(extra: string[] = []): string[] {
    // A folder (trailing slash): runsc writes one file per command and sandbox there.
    const debug = this.cfg.debugLogDir ? ["--debug", `--debug-log=${this.cfg.debugLogDir}/`] : [];
    return [`--root=${this.cfg.root}`, `--platform=${this.cfg.platform}`, ...debug, ...extra];
  }

  run(args: string[], opts: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<ExecResult> {
    return exec(this.cfg.binary, [...this.globalFlags(), ...args], {
      timeoutMs: opts.timeoutMs ?? 30_000,
      allowFail: opts.allowFail,
    });
  }

  /**
   * `run --detach` / `restore --detach` keep the stdio they were given open for the
   * sandbox's life, so they get a log file, never a pipe. netstack in a per-sandbox netns
   * needs /proc/sys/net hidden (runsc 20240729 mistakes any netns for the root one
   * otherwise), hence the private mount namespace. A disk image given is loop-mounted in that
   * namespace too: the mount exists only while the sandbox does (overlay-disk.ts). The
   * namespace starts as a copy of every mount of the host's, lazily served image trees of
   * other templates included: those copies are detached (all but `rootfs`, the sandbox's
   * own), or each sandbox would keep every tree mounted when it started alive, FUSE server
   * and all, after the tree settled or its template went (lazy-settle.ts).
   */
  detached(
    flags: string[],
    args: string[],
    logFile: string,
    opts: {
      timeoutMs?: number;
      disk?: { image: string; dir: string } | undefined;
      lowPriority?: boolean;
      /** The sandbox's own tree: the one lazily served mount it keeps. */
      rootfs?: string;
    } = {},
  ): Promise<void> {
    const { timeoutMs = 60_000, disk, lowPriority = false, rootfs } = opts;
    const cmd = [this.cfg.binary, ...this.globalFlags(flags), ...args];
    const others =
      'own="$AENV_OWN_ROOTFS"; unset AENV_OWN_ROOTFS; ' +
      `grep ' - fuse\\.${LAZYFS_NAME} ' /proc/self/mountinfo | while read -r _ _ _ _ mp _; do ` +
      '[ "$mp" = "$own" ] || umount -l "$mp"; done; ';
    const net = `${others}mount -t tmpfs -o size=4k none /proc/sys/net && exec "$@"`;
    const script = disk
      ? `mount -o loop,nodev,nosuid,noatime "$1" "$2" || { echo "aenv: cannot mount the sandbox disk $1 (needs loop devices; or set sandbox.enforce_disk_size = false)" >&2; exit 97; }; shift 2; ${net}`
      : net;
    const pre = disk ? [disk.image, disk.dir] : [];
    const fd = openSync(logFile, "a");
    return new Promise((resolve, reject) => {
      const unshare = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", ...pre, ...cmd];
      // nice(1) before anything forks: the sandbox's processes inherit it (see prioritize).
      const argv = lowPriority ? ["nice", "-n", "19", ...unshare] : unshare;
      const child = spawn(argv[0] as string, argv.slice(1), {
        stdio: ["ignore", fd, fd],
        // As mountinfo spells it: the path resolved.
        env: { ...process.env, AENV_OWN_ROOTFS: rootfs ? resolvedPath(rootfs) : "" },
      });
      closeSync(fd);
      const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
      child.on("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        if (code === 0) resolve();
        else reject(new Error(`runsc ${args[0]} exited with ${code ?? signal}; see ${logFile}`));
      });
    });
  }
}

/** Its folder resolved, not the path itself: that may be a FUSE mount, whose server a stat would wait on. */
function resolvedPath(p: string): string {
  try {
    return join(realpathSync(dirname(p)), basename(p));
  } catch {
    return p;
  }
}
