/**
 * The platform runsc's probe found, remembered for this boot and this runsc binary: the probe
 * starts a throwaway sandbox (0.4–0.7 s of every server start here), and its answer changes
 * only with the kernel (a new boot) or the binary. Kept in /run (a tmpfs emptied at boot,
 * writable by root only).
 */
import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { fileIdentity, readMemo, writeMemo } from "../../util/memo-file.js";

export const PROBE_MEMO_FILE = "/run/aenv/runsc-probe.json";

function resolveBinary(bin: string): string | undefined {
  if (bin.includes("/")) return bin;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    try {
      if (statSync(join(dir, bin)).isFile()) return join(dir, bin);
    } catch {
      // not in this folder
    }
  }
  return undefined;
}

/** What the answer depends on: the binary (path and identity), what was asked, the boot. */
export function probeKey(bin: string, asked: string): string | undefined {
  try {
    const path = resolveBinary(bin);
    if (!path) return undefined;
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    return createHash("sha256")
      .update(`${path}\0${fileIdentity(path)}\0${asked}\0${boot}`)
      .digest("hex");
  } catch {
    return undefined;
  }
}

/** The platform remembered for `key`, if it is one of `allowed`. */
export function rememberedPlatform(
  key: string | undefined,
  allowed: string[],
  file = PROBE_MEMO_FILE,
): string | undefined {
  const platform = key ? readMemo(file, key) : undefined;
  return platform !== undefined && allowed.includes(platform) ? platform : undefined;
}

export function rememberPlatform(key: string | undefined, platform: string, file = PROBE_MEMO_FILE): void {
  if (key) writeMemo(file, key, platform);
}
