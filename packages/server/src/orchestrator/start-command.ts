import type { BootSettings } from "../state/store.js";
import { envdProcess, type ProcessSpec } from "./envd-process.js";

/** How long a template's ready command may take to pass (E2B: 10 min). */
const READY_TIMEOUT_MS = 10 * 60_000;

/**
 * Starts a template's start command in the background and waits for its ready command to
 * pass: done once before a warm image is captured, by every cold boot, and by every resume
 * from a filesystem-only pause.
 */
export async function runStartCommand(
  ip: string,
  tpl: BootSettings,
  token: string | undefined,
  onLog?: (line: string) => void,
): Promise<void> {
  if (!tpl.startCmd) return;
  const sh = (cmd: string): ProcessSpec => ({
    cmd: "/bin/sh",
    args: ["-c", cmd],
    envs: tpl.env,
    cwd: tpl.workdir,
    user: tpl.user,
    token,
  });
  onLog?.(`start command: ${tpl.startCmd}`);
  await envdProcess(ip, sh(tpl.startCmd), { detach: true });
  // E2B's default when only a start command is given.
  const ready = tpl.readyCmd ?? "sleep 20";
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (let attempt = 1; ; attempt++) {
    // A check that runs past its own timeout ends in deadline_exceeded: not ready yet, try again.
    const r = await envdProcess(ip, { ...sh(ready), timeoutMs: 30_000 }).catch((err: Error) => ({
      exitCode: -1,
      error: err.message,
    }));
    if (r.exitCode === 0) {
      onLog?.(`ready command passed (attempt ${attempt})`);
      return;
    }
    if (Date.now() > deadline) throw new Error(`ready command did not pass within ${READY_TIMEOUT_MS / 1000} s`);
    await new Promise((res) => setTimeout(res, attempt < 10 ? 200 : 2000));
  }
}
