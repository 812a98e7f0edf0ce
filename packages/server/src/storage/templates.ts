import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

const TemplateFile = z.object({
  /** Changes whenever the tree changes: images taken on one revision never restore on another. */
  revision: z.number().int().nonnegative().default(1),
  id: z.string(),
  name: z.string(),
  user: z.string().default("user"),
  workdir: z.string().default("/home/user"),
  env: z.record(z.string(), z.string()).default({}),
  cpuCount: z.number().int().positive().default(2),
  memoryMB: z.number().int().positive().default(1024),
  diskSizeMB: z.number().int().positive().default(2048),
  createdAt: z.string().optional(),
});

export type Template = z.infer<typeof TemplateFile> & { rootfs: string };

/** Templates on local disk: TEMPLATES_DIR/<id>/{template.json, rootfs/}. */
export class TemplateStore {
  constructor(private readonly dir: string) {}

  get(ref: string): Template | undefined {
    return this.list().find((t) => t.id === ref || t.name === ref);
  }

  list(): Template[] {
    if (!existsSync(this.dir)) return [];
    const out: Template[] = [];
    for (const name of readdirSync(this.dir)) {
      if (name.startsWith(".")) continue;
      const file = join(this.dir, name, "template.json");
      if (!existsSync(file)) continue;
      try {
        const t = TemplateFile.parse(JSON.parse(readFileSync(file, "utf8")));
        out.push({ ...t, rootfs: join(this.dir, name, "rootfs") });
      } catch {
        // A half-written or foreign folder is not a template.
      }
    }
    return out;
  }
}
