import { join } from "node:path";
import { parseArgs } from "node:util";
import pino from "pino";
import { loadConfig } from "../config.js";
import { NodePaths } from "../node-paths.js";
import { type Template, TemplateStore } from "../state/template-catalog.js";
import { ImageStore } from "../storage/images/index.js";
import { openRepository } from "../storage/repository/open.js";
import { importTemplate } from "../templates/import.js";
import { TemplateSync } from "../templates/sync.js";

const HELP = `aenv-server import-template — make a template from an image, offline (no server needed)

Usage: aenv-server import-template --name NAME [--id ID] [--alias NAME]... [--templates-dir DIR]
                                   [--start-cmd CMD] [--ready-cmd CMD]
                                   [--memory-mb MB] [--cpu-count N]
                                   [--config FILE] [--data-dir DIR] [--no-commit] IMAGE

  IMAGE  a registry reference (host/repo:tag), oci:DIR[:tag], oci-archive:FILE[:tag]
         or docker-archive:FILE
  Env, workdir and user come from its config (root when it names none; a named one must exist).
  --alias  a further name the template answers to (repeatable; replaces the last import's)
  --start-cmd, --ready-cmd  the template's start and ready commands (running in its warm image)
  --memory-mb, --cpu-count  its sandboxes' size (default: kept from the last import, else 1024, 2)
  --templates-dir  default AENV_TEMPLATES_DIR, else /var/lib/aenv/templates
  Then the template is committed to the configured snapshot repository (as the server's
  --config / --data-dir / AENV_* settings say), so servers sharing it can start it; unless
  --no-commit or repository.commit_templates = false. A failed commit is a warning: the
  template is usable here.`;

/** `aenv-server import-template`: pulls and unpacks an image into the template catalog. */
export async function importTemplateCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: "string" },
      id: { type: "string" },
      alias: { type: "string", multiple: true },
      "templates-dir": { type: "string" },
      "start-cmd": { type: "string" },
      "ready-cmd": { type: "string" },
      "memory-mb": { type: "string" },
      "cpu-count": { type: "string" },
      config: { type: "string" },
      "data-dir": { type: "string" },
      "no-commit": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help || !values.name || positionals.length !== 1) {
    console.log(HELP);
    return values.help ? 0 : 2;
  }
  const size: { memoryMB?: number; cpuCount?: number } = {};
  for (const [flag, key] of [
    ["memory-mb", "memoryMB"],
    ["cpu-count", "cpuCount"],
  ] as const) {
    const v = values[flag];
    if (v === undefined) continue;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) {
      console.error(`import-template: --${flag} must be a positive integer, not '${v}'`);
      return 2;
    }
    size[key] = n;
  }
  const dir = values["templates-dir"] ?? process.env.AENV_TEMPLATES_DIR ?? "/var/lib/aenv/templates";
  let t: Template;
  try {
    t = await importTemplate({
      // The operator names the image here, so a registry on this host or network is theirs to use.
      images: new ImageStore({ dir: join(dir, ".images"), allowPrivateRegistries: true }),
      templates: new TemplateStore(dir),
      ref: positionals[0] as string,
      name: values.name,
      ...(values.id ? { id: values.id } : {}),
      ...(values.alias ? { aliases: values.alias } : {}),
      ...(values["start-cmd"] ? { startCmd: values["start-cmd"] } : {}),
      ...(values["ready-cmd"] ? { readyCmd: values["ready-cmd"] } : {}),
      ...size,
      onLog: (m) => {
        if (!/^(pull|unpack) layer .* (downloading|extracting) /.test(m)) console.log(`import-template: ${m}`);
      },
    });
  } catch (err) {
    // Bad references, registry and layer errors already say what is wrong: one line.
    console.error(`import-template: ${(err as Error).message}`);
    return 1;
  }
  console.log(`import-template: template '${t.name}' (${t.id}) revision ${t.revision} from ${t.fromImage}`);
  if (values["no-commit"]) return 0;
  try {
    const cfg = loadConfig({ config: values.config, dataDir: values["data-dir"], templatesDir: dir });
    if (!cfg.repository.commitTemplates) return 0;
    const log = pino({ level: "warn" });
    const repository = await openRepository(cfg, { info: () => {}, warn: () => {}, error: () => {} });
    const t0 = Date.now();
    const stagingDir = new NodePaths(cfg.dataDir).commitStaging;
    await new TemplateSync({ repository, templates: new TemplateStore(dir), stagingDir, log }).commit(t);
    console.log(`import-template: committed to the repository in ${Date.now() - t0} ms`);
  } catch (err) {
    // Config, backend or commit errors alike: the template is usable on this node.
    console.error(`import-template: warning: not committed to the repository: ${(err as Error).message}`);
  }
  return 0;
}
