import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Template, TemplateStore } from "../state/template-catalog.js";
import type { ContentStore } from "../storage/images/index.js";
import { detachMountsUnder, mountPoints } from "../util/mounts.js";
import type { PathGate } from "../util/path-gate.js";
import type { ImageCache } from "./image-cache.js";
import { treeOverheadBytes, writeTreeFromIndex } from "./tree-from-index.js";
import type { TreeIndex } from "./tree-index.js";

/** Staging folders of plain trees beside a template's rootfs: `<rootfsDir>.plain-<hex>`. */
const STAGING = /^rootfs-r\d+\.plain-[0-9a-f]+$/;

export interface SettleDeps {
  templates: TemplateStore;
  content: ContentStore;
  cache: ImageCache;
  /** Held exclusively for the swap: no sandbox start opens the path while it is empty. */
  gate: PathGate;
  log: Logger;
}

/**
 * A lazy tree whose content is all here becomes a plain tree under the same path, as an
 * unpack would have made it (hard links into the content store): its FUSE server then has
 * nothing new to serve. The mount is detached, not torn down: sandboxes started on it keep
 * it (and its server, which exits once the last lets go), while new starts, and restores of
 * sandboxes paused on it, find the same files with the same metadata on the plain tree. The
 * content gets its links, so the cache's sweep no longer counts it as unused.
 * False (the tree stays served lazily) when the template changed meanwhile or the index
 * cannot be written as a tree.
 */
export async function settleLazyTree(
  d: SettleDeps,
  t: Template,
  idx: TreeIndex,
  refetch: (key: string) => Promise<void>,
): Promise<boolean> {
  const staging = `${t.rootfs}.plain-${randomBytes(4).toString("hex")}`;
  const overhead = treeOverheadBytes(idx);
  let added = 0;
  const done = await d.cache.room(overhead);
  try {
    const asRoot = process.getuid?.() === 0;
    await writeTreeFromIndex(idx, { entryPath: (k) => d.content.entryPath(k), refetch }, staging, asRoot);
    added = overhead;
    const swapped = await d.gate.exclusive(t.rootfs, () => {
      const now = d.templates.get(t.id);
      if (!now?.lazy || now.rootfs !== t.rootfs || !existsSync(t.rootfs)) return false;
      detachMountsUnder(t.rootfs);
      // The mount point is an empty folder once detached: the plain tree replaces it whole.
      renameSync(staging, t.rootfs);
      const { lazy: _settled, ...rest } = now;
      d.templates.save(rest);
      return true;
    });
    if (swapped) d.log.info({ template: t.id, entries: idx.entries.length }, "lazy tree settled into a plain tree");
    return swapped;
  } catch (err) {
    d.log.warn({ template: t.id, err: (err as Error).message }, "lazy tree not settled; it stays served lazily");
    return false;
  } finally {
    rmSync(staging, { recursive: true, force: true });
    done(added);
  }
}

/**
 * After a restart: a lazy template whose rootfs is a plain tree (not mounted, not empty) was
 * settled before the crash let its record say so; staging folders a crash left are removed.
 * True when the template is settled.
 */
export function settledBeforeRestart(d: Pick<SettleDeps, "templates">, t: Template): boolean {
  for (const name of readdirSync(dirname(t.rootfs))) {
    if (STAGING.test(name) && name.startsWith(`${basename(t.rootfs)}.`)) {
      rmSync(join(dirname(t.rootfs), name), { recursive: true, force: true });
    }
  }
  if (mountPoints().has(t.rootfs) || !existsSync(t.rootfs) || readdirSync(t.rootfs).length === 0) return false;
  const { lazy: _settled, ...rest } = t;
  d.templates.save(rest);
  return true;
}
