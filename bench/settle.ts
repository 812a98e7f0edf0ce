/** Waits for a server's earlier sandboxes to be gone before the next timed step. */
import { execFileSync } from "node:child_process";
import type { TestServer } from "../test/helpers/server.js";
import { cpuMs } from "./host-probes.js";

/**
 * Until the server's runsc root lists no container but those of the sandboxes in `keep`, at
 * most 30 s. A kill answers before its `runsc delete` (1-2 s of CPU) is done; a timed step that
 * starts meanwhile shares the cores with it. Runtime ids are the sandbox id plus a suffix.
 */
export async function untilOthersGone(server: TestServer, keep: readonly string[] = []): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const left = execFileSync("runsc", [`--root=${server.dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" })
      .split("\n")
      .filter((id) => id && !keep.some((k) => id.startsWith(k)));
    if (left.length === 0) return;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Until the processes together used under `pctOfCore` % of a core over one second, at most
 * `maxMs`. Nodes that join a cluster commit their local templates to the repository in the
 * background (seconds of hashing each); a timed step that starts meanwhile measures that too.
 */
export async function untilQuiet(pids: readonly (number | undefined)[], pctOfCore = 10, maxMs = 60_000): Promise<void> {
  const sum = (): number => pids.reduce<number>((s, p) => s + (cpuMs(p) || 0), 0);
  const deadline = Date.now() + maxMs;
  while (Date.now() < deadline) {
    const a = sum();
    await new Promise((r) => setTimeout(r, 1000));
    if (((sum() - a) / 1000) * 100 < pctOfCore) return;
  }
}
