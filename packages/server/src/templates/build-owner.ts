/**
 * Which server owns a template's build in progress: `builds/.owner` holds its PID. The
 * templates dir may be shared by servers on one host, so a server failing builds that were
 * interrupted at its start must leave those another running server still owns.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const ownerFile = (templateDir: string) => join(templateDir, "builds", ".owner");

/** This server waits for or runs the template's build now. */
export function claimBuild(templateDir: string): void {
  mkdirSync(join(templateDir, "builds"), { recursive: true });
  writeFileSync(ownerFile(templateDir), String(process.pid));
}

/** Whether the server that last claimed the template's build still runs. */
export function buildOwnerAlive(templateDir: string): boolean {
  try {
    const pid = Number(readFileSync(ownerFile(templateDir), "utf8").trim());
    if (!Number.isInteger(pid) || pid <= 1) return false;
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("aenv-server");
  } catch {
    return false;
  }
}
