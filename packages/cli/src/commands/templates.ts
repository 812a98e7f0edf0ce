import type { Command } from "commander";
import { ApiError, type TemplateInfo } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { CliError, notSupported } from "../errors.js";
import { relativeTime } from "../output.js";
import { buildLogSink } from "../progress/build-log.js";

export const TEMPLATE_COLUMNS = [
  { header: "ID", get: (t: TemplateInfo) => t.templateID },
  { header: "NAME", get: (t: TemplateInfo) => t.names?.[0] ?? t.aliases?.[0] },
  { header: "STATUS", get: (t: TemplateInfo) => t.buildStatus },
  { header: "FROM", get: (t: TemplateInfo) => t.fromImage ?? t.fromTemplate },
  { header: "UPDATED", get: (t: TemplateInfo) => (t.updatedAt ? relativeTime(t.updatedAt) : "") },
];

const POLL_MS = 500;

export function registerTemplates(program: Command, ctx: Ctx): void {
  const tpl = program
    .command("template")
    .description("templates sandboxes start from (build them with 'aenv pull' or 'aenv build')")
    .addHelpText("after", examples("aenv template ls", "aenv template watch web", "aenv template rm web"));
  tpl
    .command("ls")
    .alias("list")
    .description("list templates")
    .addHelpText("after", examples("aenv template ls", "aenv template ls -o json | jq -r '.[].names[0]'"))
    .action(async () => {
      let rows: TemplateInfo[];
      try {
        rows = await ctx.api().templates();
      } catch (e) {
        if (e instanceof ApiError && (e.status === 404 || e.status === 405)) throw notSupported("listing templates");
        throw e;
      }
      ctx.out().list(rows, TEMPLATE_COLUMNS);
    });

  tpl
    .command("rm")
    .description("delete a template (refused while sandboxes or snapshots use it)")
    .argument("<template>", "template ID or name")
    .addHelpText("after", examples("aenv template rm web"))
    .action(async (ref: string) => {
      try {
        await ctx.api().deleteTemplate(ref);
      } catch (e) {
        if (e instanceof ApiError && e.status === 409)
          throw new CliError(`template '${ref}' is in use by sandboxes or snapshots; remove them first (aenv ls)`);
        throw e;
      }
      ctx.out().item({ template: ref, result: "removed" }, `${ref} removed`);
    });

  tpl
    .command("watch")
    .description("follow a build's status and logs until it is ready (exit 0) or fails (exit 1)")
    .argument("<template>", "template ID or name")
    .argument("[build]", "build ID (default: the template's latest build)")
    .addHelpText("after", examples("aenv build Dockerfile --name web --detach", "aenv template watch web"))
    .action(async (ref: string, build: string | undefined) => {
      const api = ctx.api();
      const info = await api.template(ref);
      const buildID = build ?? info.buildID;
      if (!buildID) throw new CliError(`template '${ref}' has no build`);
      const sink = buildLogSink();
      let offset = 0;
      let st: Awaited<ReturnType<typeof api.buildStatus>>;
      try {
        for (;;) {
          st = await api.buildStatus(info.templateID, buildID, offset);
          offset += st.logEntries.length;
          for (const e of st.logEntries) sink(e);
          // Drain the log before reporting the end.
          if ((st.status === "ready" || st.status === "error") && st.logEntries.length === 0) break;
          if (st.logEntries.length === 0) await new Promise((r) => setTimeout(r, POLL_MS));
        }
      } finally {
        sink.close();
      }
      if (st.status === "error") throw new CliError(`build failed: ${st.reason?.message ?? "unknown error"}`);
      const name = info.names?.[0] ?? ref;
      ctx
        .out()
        .item({ templateID: info.templateID, buildID, name, status: st.status }, `${name} (${info.templateID}) ready`);
    });
}
