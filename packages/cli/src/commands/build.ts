import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { SANDBOX_LIMITS } from "@aenv/protocol/rest";
import type { Command } from "commander";
import { type BuildInfo, Template, type TemplateBuilder, type TemplateClass } from "e2b";
import { runBuild } from "../build-run.js";
import { resolveConfig } from "../config.js";
import { type Ctx, examples } from "../context.js";
import { parseDockerfile } from "../dockerfile.js";
import { CliError } from "../errors.js";
import { probeReadyCmd, templateNameFromImage } from "../images.js";
import { parsePositiveInt } from "../parse.js";
import { specToTemplate } from "../template-spec.js";

interface CommonOpts {
  name?: string;
  readyCmd?: string;
  probe?: number;
  cpu?: number;
  memory?: number;
  detach?: boolean;
}

function readyFrom(o: CommonOpts): string | undefined {
  if (o.readyCmd && o.probe) throw new CliError("give --ready-cmd or --probe, not both");
  return o.probe ? probeReadyCmd(o.probe) : o.readyCmd;
}

const addCommon = (c: Command) =>
  c
    .option("--name <name>", "template name")
    .option("--ready-cmd <cmd>", "command that exits 0 once the start command is up (run with /bin/sh -c)")
    .option("--probe <port>", "ready once something listens on this TCP port", parsePositiveInt("--probe", 65535))
    .option(
      "--cpu <n>",
      "vCPUs of sandboxes from this template",
      parsePositiveInt("--cpu", SANDBOX_LIMITS.cpuCount.max),
    )
    .option(
      "--memory <mb>",
      "memory (MiB) of sandboxes from this template",
      parsePositiveInt("--memory", SANDBOX_LIMITS.memoryMB.max),
    )
    .option("-d, --detach", "start the build and print its IDs; follow it with 'aenv template watch'");

export function registerBuild(program: Command, ctx: Ctx): void {
  const finish = (info: BuildInfo, detach: boolean | undefined) => {
    const data = { templateID: info.templateId, buildID: info.buildId, name: info.name };
    const text = detach
      ? `${info.name} (${info.templateId}) building; follow it with 'aenv template watch ${info.name}'`
      : `${info.name} (${info.templateId}) ready; start it with 'aenv start ${info.name}'`;
    ctx.out().item(data, text);
  };
  const build = (t: TemplateClass, name: string, o: CommonOpts, lines?: { stepLines: number[]; file: string }) =>
    runBuild(resolveConfig(), t, {
      name,
      cpuCount: o.cpu,
      memoryMB: o.memory,
      detach: o.detach,
      ...(lines ?? {}),
    });

  addCommon(
    program
      .command("pull")
      .description("make a template from a container image (one progress bar per layer on a terminal)")
      .argument("<image>", "image reference, e.g. docker.io/library/nginx:1.27 or 127.0.0.1:5000/app:1")
      .option("--start-cmd <cmd>", "command started in every sandbox (running in the template's snapshot)"),
  )
    .addHelpText(
      "after",
      examples(
        "aenv pull python:3.12-slim",
        "aenv pull nginx:1.27 --name web --start-cmd 'nginx -g \"daemon off;\"' --probe 80",
        "aenv pull 127.0.0.1:5000/app:1 --cpu 2 --memory 1024 --detach",
      ) +
        "\n--probe PORT checks /proc/net/tcp with shell builtins (any POSIX sh); where /proc/net is\n" +
        "unreadable it falls back to bash's /dev/tcp. The name defaults to the image's last path part.\n",
    )
    .action(async (image: string, o: CommonOpts & { startCmd?: string }) => {
      const ready = readyFrom(o);
      const name = o.name ?? templateNameFromImage(image);
      const from: TemplateBuilder = Template().fromImage(image);
      const t: TemplateClass = o.startCmd
        ? from.setStartCmd(o.startCmd, ready ?? "sleep 20")
        : ready
          ? from.setReadyCmd(ready)
          : from;
      finish(await build(t, name, o), o.detach);
    });

  addCommon(
    program
      .command("build")
      .description("build a template from a Dockerfile-like spec, streaming the build log")
      .argument("<file>", "spec file (FROM, RUN, ENV, ARG, WORKDIR, USER, COPY/ADD, CMD/ENTRYPOINT, HEALTHCHECK)")
      .option("--context <dir>", "folder COPY sources are relative to (default: the file's folder)"),
  )
    .addHelpText(
      "after",
      examples(
        "aenv build Dockerfile --name web",
        "aenv build ./app/Dockerfile --context . --probe 8080",
        "aenv build Dockerfile --name web --detach && aenv template watch web",
      ) +
        "\nCMD/ENTRYPOINT become the start command (running in the template's snapshot);\n" +
        "HEALTHCHECK CMD, --ready-cmd or --probe the ready check. EXPOSE, VOLUME, LABEL and\n" +
        "STOPSIGNAL are ignored; multi-stage builds, heredocs, SHELL and ONBUILD are refused.\n" +
        "Without --name the template is named after the context folder.\n",
    )
    .action(async (file: string, o: CommonOpts & { context?: string }) => {
      let text: string;
      try {
        text = readFileSync(file, "utf8");
      } catch {
        throw new CliError(`${file}: cannot read the file`);
      }
      let spec: ReturnType<typeof parseDockerfile>;
      try {
        spec = parseDockerfile(text);
      } catch (e) {
        throw new CliError(`${file}: ${(e as Error).message}`);
      }
      for (const n of spec.notes) process.stderr.write(`${file}: ${n}\n`);
      const context = resolve(o.context ?? dirname(file));
      const name = o.name ?? templateNameFromImage(context.split("/").pop() || "template");
      const { template, stepLines } = specToTemplate(spec, context, readyFrom(o));
      finish(await build(template, name, o, { stepLines, file }), o.detach);
    });
}
