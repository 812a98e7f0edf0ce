/**
 * Puts `sudo` and `su` first on every PATH in the sandbox: symlinks in /usr/local/bin to
 * aenv-sudo in the runtime folder mounted at /.aenv (a setuid sudo from the image cannot
 * work under runsc's no_new_privs; /usr/local/bin comes before /usr/bin and /bin).
 */
import { existsSync, mkdirSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { log } from "../log.js";

export const SUDO_CLIENT = "/.aenv/bin/aenv-sudo";

/** Only envd inside a sandbox (started by aenv-init, PID 1, with the runtime mounted) does this. */
export function inSandbox(): boolean {
  return process.ppid === 1 && existsSync(SUDO_CLIENT);
}

export function installSudoLinks(): void {
  for (const name of ["sudo", "su"]) {
    const link = `/usr/local/bin/${name}`;
    try {
      if (readlinkSync(link) === SUDO_CLIENT) continue;
    } catch {
      // missing or not a link
    }
    try {
      mkdirSync("/usr/local/bin", { recursive: true });
      rmSync(link, { force: true });
      symlinkSync(SUDO_CLIENT, link);
    } catch (err) {
      log("warn", `${name} not installed`, { err });
    }
  }
}
