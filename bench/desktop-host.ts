/** What the desktop benchmark reads from the host and from a desktop: warm images, freezer state, idle saves, windows. */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Sandbox } from "@e2b/desktop";
import { TEMPLATES_DIR, type TestServer } from "../test/helpers/server.js";

/** The SDK's default resolution, the one the template's warm image runs. */
export const W = 1024;
export const H = 768;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function checkPng(b: Uint8Array): void {
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (!Buffer.from(b.subarray(0, 8)).equals(sig)) throw new Error("screenshot() did not return a PNG");
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const [w, h] = [v.getUint32(16), v.getUint32(20)];
  if (w !== W || h !== H) throw new Error(`screenshot is ${w}x${h}, expected ${W}x${H}`);
}

/** The desktop's warm images of this revision in the templates dir now. */
export function warmDirs(): string[] {
  const { revision } = JSON.parse(readFileSync(join(TEMPLATES_DIR, "desktop", "template.json"), "utf8")) as {
    revision: number;
  };
  const warm = join(TEMPLATES_DIR, ".warm");
  return existsSync(warm) ? readdirSync(warm).filter((n) => n.startsWith(`desktop-r${revision}-`)) : [];
}

/**
 * Until the server has the desktop's warm image: it captures one at start (and logs it) unless
 * one for its runtime is on disk already, which it takes silently. The first create says which
 * it was (restoredFromImage).
 */
export async function untilWarmImage(s: TestServer, before: string[]): Promise<void> {
  const t0 = Date.now();
  for (;;) {
    if (/"template":"desktop"[^\n]*"template warm image ready"/.test(s.logs())) return;
    if (before.length > 0 && !warmDirs().some((n) => !before.includes(n)) && Date.now() - t0 > 10_000) return;
    if (Date.now() - t0 > 300_000) throw new Error("no warm image of the desktop template within 300 s");
    await sleep(200);
  }
}

/** The sandbox's cgroup folder, or undefined once its runtime is gone (saved, killed). */
export function cgroupDir(id: string): string | undefined {
  const v2 = existsSync("/sys/fs/cgroup/cgroup.controllers");
  const root = v2 ? "/sys/fs/cgroup/aenv" : "/sys/fs/cgroup/freezer/aenv";
  const dir = existsSync(root) ? readdirSync(root).find((d) => d.startsWith(id)) : undefined;
  return dir === undefined ? undefined : join(root, dir);
}

/** Whether the host's freezer holds the sandbox now (read from its cgroup: no traffic to it). */
export function frozen(id: string): boolean {
  const dir = cgroupDir(id);
  if (!dir) return false;
  try {
    return existsSync(join(dir, "cgroup.events"))
      ? /^frozen 1$/m.test(readFileSync(join(dir, "cgroup.events"), "utf8"))
      : readFileSync(join(dir, "freezer.state"), "utf8").trim() === "FROZEN";
  } catch {
    return false;
  }
}

/** The server's "idle sandbox saved to disk" log entry for a sandbox, if it has one. */
export function savedEntry(server: TestServer, id: string): { ms: number; bytes: number } | undefined {
  const line = server
    .logs()
    .split("\n")
    .find((l) => l.includes(id) && l.includes("idle sandbox saved to disk"));
  if (!line) return undefined;
  const e = JSON.parse(line) as { ms?: number; bytes?: number };
  return { ms: e.ms ?? Number.NaN, bytes: e.bytes ?? Number.NaN };
}

export async function until(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(250);
  }
}

/** Until `wmctrl -l` in the desktop lists a window whose title matches. */
export async function untilWindow(s: Sandbox, pattern: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const out = (await s.commands.run("wmctrl -l")).stdout;
    if (pattern.test(out)) return;
    if (Date.now() > deadline) throw new Error(`no window like ${pattern} within ${timeoutMs} ms:\n${out}`);
    await sleep(500);
  }
}
