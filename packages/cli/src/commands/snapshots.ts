import type { Command } from "commander";
import type { SnapshotInfo } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { relativeTime } from "../output.js";

function size(b: number | undefined): string {
  if (b === undefined) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = b;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${u[i]}`;
}

export const SNAPSHOT_COLUMNS = [
  { header: "ID", get: (s: SnapshotInfo) => s.snapshotID },
  { header: "NAMES", get: (s: SnapshotInfo) => s.names },
  { header: "SANDBOX", get: (s: SnapshotInfo) => s.sandboxID },
  { header: "SIZE", get: (s: SnapshotInfo) => size(s.sizeBytes) },
  { header: "CREATED", get: (s: SnapshotInfo) => (s.createdAt ? relativeTime(s.createdAt) : "") },
];

export function registerSnapshots(program: Command, ctx: Ctx): void {
  const snap = program
    .command("snapshot")
    .description("persistent snapshots of sandboxes (start new sandboxes from them by ID or name)")
    .addHelpText(
      "after",
      examples("aenv snapshot create i1a2b3c4d5e6f7 --name my-env", "aenv snapshot ls", "aenv start my-env"),
    );
  snap
    .command("create")
    .description("snapshot a sandbox (it keeps running)")
    .argument("<id>", "sandbox ID")
    .option("--name <name>", "a name to start sandboxes from")
    .addHelpText("after", examples("aenv snapshot create i1a2b3c4d5e6f7 --name my-env"))
    .action(async (id: string, o: { name?: string }) => {
      const s = await ctx.api().snapshot(id, o.name);
      ctx.out().item(s, s.snapshotID);
    });
  snap
    .command("ls")
    .alias("list")
    .description("list snapshots")
    .option("--sandbox <id>", "only snapshots of this sandbox")
    .addHelpText("after", examples("aenv snapshot ls --sandbox i1a2b3c4d5e6f7"))
    .action(async (o: { sandbox?: string }) => {
      ctx.out().list(await ctx.api().snapshots(o.sandbox), SNAPSHOT_COLUMNS);
    });
  snap
    .command("rm")
    .description("delete a snapshot")
    .argument("<snapshot>", "snapshot ID")
    .addHelpText("after", examples("aenv snapshot rm s1a2b3c4d5e6f7"))
    .action(async (id: string) => {
      await ctx.api().deleteSnapshot(id);
      ctx.out().item({ snapshotID: id, result: "removed" }, `${id} removed`);
    });
}
