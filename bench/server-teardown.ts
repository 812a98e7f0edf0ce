/**
 * Ending a benchmark's server whatever state it is in: a stop that hangs is given up after
 * 30 s, and runsc containers it left behind are deleted by hand before its data folder goes.
 */
import { execFileSync } from "node:child_process";
import { cleanupDataDir, type TestServer } from "../test/helpers/server.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The runsc containers of a server's own runsc root (`list -quiet` reads state files only). */
export function runscIds(s: TestServer): string[] {
  try {
    return execFileSync("runsc", [`--root=${s.dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" })
      .split("\n")
      .filter(Boolean);
  } catch {
    return [];
  }
}

/** Stops the server (it kills its sandboxes on SIGTERM), deletes what is left, removes its data. */
export async function stopBenchServer(s: TestServer): Promise<void> {
  await Promise.race([s.stop(), sleep(30_000)]).catch(() => {});
  for (const id of runscIds(s)) {
    try {
      execFileSync("runsc", [`--root=${s.dataDir}/runsc`, "delete", "--force", id], { stdio: "ignore" });
    } catch {
      // gone meanwhile
    }
  }
  cleanupDataDir(s);
}
