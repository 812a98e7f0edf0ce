import type { Command } from "commander";
import { ApiError } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { CliError, notSupported } from "../errors.js";

export function registerTemplates(program: Command, ctx: Ctx): void {
  const tpl = program.command("template").description("templates sandboxes start from");
  tpl
    .command("ls")
    .alias("list")
    .description("list templates")
    .addHelpText("after", examples("aenv template ls"))
    .action(async () => {
      let rows: unknown[];
      try {
        rows = await ctx.api().templates();
      } catch (e) {
        if (e instanceof ApiError && (e.status === 404 || e.status === 405)) throw notSupported("listing templates");
        throw e;
      }
      const r = rows as Array<Record<string, unknown>>;
      ctx.out().list(r, [
        { header: "ID", get: (t) => t.templateID ?? t.id },
        { header: "ALIASES", get: (t) => t.aliases ?? t.names },
      ]);
    });

  const unsupported = (name: string, arg: string, desc: string) =>
    program
      .command(name)
      .description(`${desc} (not supported by this server yet)`)
      .argument(arg)
      .allowUnknownOption()
      .addHelpText("after", examples(`aenv ${name} ${arg.replace(/[<>[\]]/g, "")}`))
      .action(() => {
        throw new CliError(`'aenv ${name}' is not supported by this server yet (needs the template build API)`, 2);
      });
  unsupported("pull", "<image>", "import a container image as a template");
  unsupported("build", "[dir]", "build a template from a Dockerfile");
}
