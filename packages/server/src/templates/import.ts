import { lstatSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { newTemplateId } from "../state/ids.js";
import { DEFAULT_PATH, type Template, type TemplateStore, validTemplateName } from "../state/template-catalog.js";
import type { ImageStore } from "../storage/images/index.js";
import { publishTree } from "../util/durable-write.js";
import { imageProvider } from "./image-provider.js";

/** Whether the tree has an account, reading its /etc/passwd only if that is a plain file. */
export function hasAccount(rootfs: string, user: string): boolean {
  const passwd = join(rootfs, "etc", "passwd");
  try {
    if (!lstatSync(join(rootfs, "etc")).isDirectory() || !lstatSync(passwd).isFile()) return false;
    return readFileSync(passwd, "utf8")
      .split("\n")
      .some((l) => l.split(":")[0] === user);
  } catch {
    return false;
  }
}

/**
 * A template straight from an image, with no build steps and no server running: pull (an OCI
 * layout, an archive or a registry), unpack, record. This is how the default `base` template
 * is made from the tree debootstrap produces. The image's user must exist in it; the warm
 * image is taken by the server when it starts.
 */
export async function importTemplate(opts: {
  images: ImageStore;
  templates: TemplateStore;
  ref: string;
  name: string;
  id?: string;
  /** Further names it answers to (replacing those of the last import; kept when not given). */
  aliases?: string[];
  cpuCount?: number;
  memoryMB?: number;
  /** The template's start and ready commands (kept from the last import when not given). */
  startCmd?: string;
  readyCmd?: string;
  onLog?: (message: string) => void;
}): Promise<Template> {
  if (!validTemplateName(opts.name)) throw new Error(`invalid template name '${opts.name}'`);
  const existing = opts.templates.get(opts.id ?? opts.name);
  const id = existing?.id ?? opts.id ?? newTemplateId();
  for (const alias of opts.aliases ?? []) {
    if (!validTemplateName(alias)) throw new Error(`invalid template alias '${alias}'`);
    const other = opts.templates.get(alias);
    if (other && other.id !== id)
      throw new Error(`alias '${alias}' is taken by template '${other.name}' (${other.id})`);
  }
  const revision = (existing?.revision ?? 0) + 1;
  const rootfsDir = `rootfs-r${revision}`;
  const dir = join(opts.templates.dir, id);
  const tmp = join(dir, `${rootfsDir}.tmp`);
  rmSync(tmp, { recursive: true, force: true });
  const log = opts.onLog ?? (() => {});
  const img = await imageProvider(opts.images).pullInto(opts.ref, tmp, log);
  // As a container runtime would: root when the image names no user.
  const user = img.user || "root";
  if (user !== "root" && user !== "0" && !hasAccount(tmp, user)) {
    rmSync(tmp, { recursive: true, force: true });
    throw new Error(`image ${opts.ref} has no account '${user}' (set the image's User, or build with steps)`);
  }
  rmSync(join(dir, rootfsDir), { recursive: true, force: true });
  await publishTree(tmp, join(dir, rootfsDir));
  const now = new Date().toISOString();
  return opts.templates.save({
    id,
    name: opts.name,
    aliases: [...new Set(opts.aliases ?? existing?.aliases ?? [])].filter((a) => a !== opts.name),
    revision,
    rootfsDir,
    user,
    workdir: img.workdir || (user === "root" ? "/root" : `/home/${user}`),
    env: { PATH: DEFAULT_PATH, ...img.env },
    cpuCount: opts.cpuCount ?? existing?.cpuCount ?? 2,
    memoryMB: opts.memoryMB ?? existing?.memoryMB ?? 1024,
    diskSizeMB: existing?.diskSizeMB ?? 2048,
    startCmd: opts.startCmd ?? existing?.startCmd,
    readyCmd: opts.readyCmd ?? existing?.readyCmd,
    createdAt: existing?.createdAt ?? now,
    fromImage: img.ref,
    imageDigest: img.digest,
    buildId: `import-r${revision}`,
    buildStatus: "ready",
    buildCount: (existing?.buildCount ?? 0) + 1,
  });
}
