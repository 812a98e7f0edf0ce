/**
 * The platform runsc's probe found, remembered for this boot and this runsc binary: the probe
 * starts a throwaway sandbox (0.4–0.7 s of every server start here), and its answer changes
 * only with the kernel (a new boot) or the binary. Kept in /run (a tmpfs emptied at boot,
 * writable by root only).
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";

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

/** What the answer depends on: the binary (path, inode, size, times), what was asked, the boot. */
export function probeKey(bin: string, asked: string): string | undefined {
  try {
    const path = resolveBinary(bin);
    if (!path) return undefined;
    const st = statSync(path, { bigint: true });
    const boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    return createHash("sha256")
      .update(`${path}\0${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}\0${asked}\0${boot}`)
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
  if (!key) return undefined;
  try {
    const v = JSON.parse(readFileSync(file, "utf8")) as { key?: unknown; platform?: unknown };
    return v.key === key && typeof v.platform === "string" && allowed.includes(v.platform) ? v.platform : undefined;
  } catch {
    return undefined;
  }
}

export function rememberPlatform(key: string | undefined, platform: string, file = PROBE_MEMO_FILE): void {
  if (!key) return;
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ key, platform }), { mode: 0o600 });
    renameSync(tmp, file);
  } catch {
    // Remembered or not, the probe's answer stands.
  }
}
