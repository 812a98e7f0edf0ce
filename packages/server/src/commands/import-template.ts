import { join } from "node:path";
import { parseArgs } from "node:util";
import { importTemplate } from "../builds/import.js";
import { ImageStore } from "../storage/images/index.js";
import { TemplateStore } from "../storage/templates.js";

const HELP = `aenv-server import-template — make a template from an image, offline (no server needed)

Usage: aenv-server import-template --name NAME [--id ID] [--templates-dir DIR] IMAGE

  IMAGE  a registry reference (host/repo:tag), oci:DIR[:tag], oci-archive:FILE[:tag]
         or docker-archive:FILE
  The image's User must exist in it; env, workdir and user come from its config.
  --templates-dir  default AENV_TEMPLATES_DIR, else /var/lib/aenv/templates`;

/** `aenv-server import-template`: pulls and unpacks an image into the template catalog. */
export async function importTemplateCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: "string" },
      id: { type: "string" },
      "templates-dir": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help || !values.name || positionals.length !== 1) {
    console.log(HELP);
    return values.help ? 0 : 2;
  }
  const dir = values["templates-dir"] ?? process.env.AENV_TEMPLATES_DIR ?? "/var/lib/aenv/templates";
  const t = await importTemplate({
    images: new ImageStore({ dir: join(dir, ".images") }),
    templates: new TemplateStore(dir),
    ref: positionals[0] as string,
    name: values.name,
    ...(values.id ? { id: values.id } : {}),
    onLog: (m) => {
      if (!/^(pull|unpack) layer .* (downloading|extracting) /.test(m)) console.log(`import-template: ${m}`);
    },
  });
  console.log(`import-template: template '${t.name}' (${t.id}) revision ${t.revision} from ${t.fromImage}`);
  return 0;
}
