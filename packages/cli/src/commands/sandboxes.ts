import { SANDBOX_LIMITS } from "@aenv/protocol/rest";
import type { Command } from "commander";
import type { ListedSandbox } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";
import { relativeTime } from "../output.js";
import { collectKeyValue, metadataQuery, parsePositiveInt, parseState } from "../parse.js";
import { withSpinner } from "../progress/spinner.js";
import { attachShell } from "./shell.js";

export const SANDBOX_COLUMNS = [
  { header: "ID", get: (s: ListedSandbox) => s.sandboxID },
  { header: "TEMPLATE", get: (s: ListedSandbox) => s.alias || s.templateID },
  { header: "STATE", get: (s: ListedSandbox) => s.state },
  { header: "STARTED", get: (s: ListedSandbox) => relativeTime(s.startedAt) },
  { header: "ENDS", get: (s: ListedSandbox) => (s.state === "paused" ? "" : relativeTime(s.endAt)) },
  { header: "METADATA", get: (s: ListedSandbox) => s.metadata },
];

export function registerSandboxes(program: Command, ctx: Ctx): void {
  program
    .command("ls")
    .alias("list")
    .description("list sandboxes")
    .option("--state <state>", "only 'running' or 'paused' sandboxes", parseState)
    .option("--metadata <K=V>", "only sandboxes with this metadata (repeatable)", collectKeyValue)
    .addHelpText(
      "after",
      examples("aenv ls", "aenv ls --state paused --metadata owner=alice", "aenv ls -o json | jq '.[].sandboxID'"),
    )
    .action(async (o: { state?: string; metadata?: Record<string, string> }) => {
      const rows = await ctx
        .api()
        .list({ state: o.state, metadata: o.metadata ? metadataQuery(o.metadata) : undefined });
      ctx.out().list(rows, SANDBOX_COLUMNS);
    });

  program
    .command("start")
    .description("create a sandbox and open a shell in it (or print its ID with --detach)")
    .argument("[template]", "template name or ID (an image reference with --cold)", "base")
    .option("-d, --detach", "do not attach a shell; print the sandbox ID")
    .option("--cold", "boot straight from a container image (pulled and unpacked on first use)")
    .option("--cpu <n>", "vCPUs (with --cold)", parsePositiveInt("--cpu", SANDBOX_LIMITS.cpuCount.max))
    .option("--memory <mb>", "memory in MiB (with --cold)", parsePositiveInt("--memory", SANDBOX_LIMITS.memoryMB.max))
    .option("--timeout <seconds>", "time to live in seconds", parsePositiveInt("--timeout", 86_400))
    .option("--env <K=V>", "environment variable (repeatable)", collectKeyValue)
    .option("--metadata <K=V>", "metadata (repeatable)", collectKeyValue)
    .option("--rm", "kill the sandbox when the shell exits")
    .addHelpText(
      "after",
      examples(
        "aenv start",
        "aenv start base --detach --timeout 600 --env FOO=bar --metadata owner=alice",
        "aenv start --cold python:3.12-slim --cpu 2 --memory 1024",
      ),
    )
    .action(
      async (
        template: string,
        o: {
          detach?: boolean;
          timeout?: number;
          env?: Record<string, string>;
          metadata?: Record<string, string>;
          rm?: boolean;
          cold?: boolean;
          cpu?: number;
          memory?: number;
        },
      ) => {
        const api = ctx.api();
        if (!o.cold && (o.cpu || o.memory))
          throw new CliError("--cpu and --memory apply to --cold starts; templates fix them at build time");
        const common = { timeout: o.timeout, envVars: o.env, metadata: o.metadata };
        const created = o.cold
          ? await withSpinner(`Starting ${template}`, () =>
              api.createCold({ image: template, cpuCount: o.cpu, memoryMB: o.memory, ...common }),
            )
          : await api.create({ templateID: template, ...common });
        if (o.detach) {
          ctx.out().item(created, created.sandboxID);
          return;
        }
        process.stderr.write(`Started sandbox ${created.sandboxID}\n`);
        let code: number;
        try {
          code = await attachShell(api, created.sandboxID);
        } finally {
          if (o.rm) await api.kill(created.sandboxID).catch(() => undefined);
        }
        if (!o.rm)
          process.stderr.write(
            `Sandbox ${created.sandboxID} is still running ('aenv rm ${created.sandboxID}' to remove it)\n`,
          );
        process.exitCode = code;
      },
    );

  const simple = (name: string, desc: string, run: (id: string) => Promise<unknown>, done: string, alias?: string) => {
    const c = program
      .command(name)
      .description(desc)
      .argument("<id>", "sandbox ID")
      .addHelpText("after", examples(`aenv ${name} i1a2b3c4d5e6f7`))
      .action(async (id: string) => {
        await run(id);
        ctx.out().item({ sandboxID: id, result: done }, `${id} ${done}`);
      });
    if (alias) c.alias(alias);
  };
  program
    .command("pause")
    .description("pause a running sandbox (keeps its memory and files)")
    .argument("<id>", "sandbox ID")
    .option("--no-memory", "keep only its files: resuming boots it afresh (no processes), nothing kept in memory")
    .addHelpText("after", examples("aenv pause i1a2b3c4d5e6f7", "aenv pause --no-memory i1a2b3c4d5e6f7"))
    .action(async (id: string, o: { memory: boolean }) => {
      await withSpinner(`Pausing ${id}`, () => ctx.api().pause(id, { memory: o.memory }));
      const done = o.memory ? "paused" : "paused (files only)";
      ctx.out().item({ sandboxID: id, result: done }, `${id} ${done}`);
    });
  simple(
    "resume",
    "resume a paused sandbox",
    (id) => withSpinner(`Resuming ${id}`, () => ctx.api().resume(id)),
    "resumed",
  );
  simple("rm", "kill a sandbox and delete it", (id) => ctx.api().kill(id), "removed", "kill");

  program
    .command("timeout")
    .description("set a sandbox's time to live, counted from now")
    .argument("<id>", "sandbox ID")
    .argument("<seconds>", "seconds from now", parsePositiveInt("SECONDS", 86_400))
    .addHelpText("after", examples("aenv timeout i1a2b3c4d5e6f7 3600"))
    .action(async (id: string, seconds: number) => {
      await ctx.api().setTimeout(id, seconds);
      ctx.out().item({ sandboxID: id, timeout: seconds }, `${id} ends in ${seconds}s`);
    });

  program
    .command("fork")
    .description("clone a running sandbox (memory, processes and files) into new sandboxes")
    .argument("<id>", "sandbox ID")
    .option("-n, --count <n>", "how many copies", parsePositiveInt("--count", 100), 1)
    .addHelpText("after", examples("aenv fork i1a2b3c4d5e6f7 --count 4"))
    .action(async (id: string, o: { count: number }) => {
      const results = await withSpinner(`Forking ${id} ×${o.count}`, () => ctx.api().fork(id, o.count));
      const rows = results.map((r) =>
        "sandbox" in r
          ? { sandboxID: r.sandbox.sandboxID, error: "" }
          : { sandboxID: "", error: `${r.error.message} (${r.error.code})` },
      );
      ctx.out().list(rows, [
        { header: "ID", get: (r) => r.sandboxID },
        { header: "ERROR", get: (r) => r.error },
      ]);
      const failed = rows.filter((r) => r.error).length;
      if (failed) throw new CliError(`${failed} of ${rows.length} forks failed`);
    });
}
