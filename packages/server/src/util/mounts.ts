import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { sep } from "node:path";

/** The FUSE name aenv-lazyfs mounts its trees under (native/lazyfs): their type is `fuse.<name>`. */
export const LAZYFS_NAME = "aenv-lazyfs";

/** Mount points of this mount namespace (the fifth field of mountinfo, octal escapes undone). */
export function mountPoints(): Set<string> {
  const out = new Set<string>();
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const f = line.split(" ");
    if (f[4]) out.add(f[4].replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8))));
  }
  return out;
}

/**
 * Detaches whatever is mounted at or below `dir` (a lazily served image tree), so removing the
 * folder removes files, not the contents of a mount. Lazy (`-l`): a sandbox still holding the
 * mount keeps it until it lets go.
 */
export function detachMountsUnder(dir: string): void {
  const below = [...mountPoints()].filter((m) => m === dir || m.startsWith(dir + sep));
  for (const m of below.sort((a, b) => b.length - a.length)) spawnSync("umount", ["-l", m], { stdio: "ignore" });
}
