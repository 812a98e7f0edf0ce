import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { BuildState } from "@aenv/protocol/rest";
import { z } from "zod";
import { writeFileDurableSync } from "../util/durable-write.js";
import { detachMountsUnder } from "../util/mounts.js";

const TemplateFile = z.object({
  /** Changes whenever the tree changes: images taken on one revision never restore on another. */
  revision: z.number().int().nonnegative().default(1),
  id: z.string(),
  /** Primary alias. */
  name: z.string(),
  /**
   * Further names the template answers to wherever a template is named (E2B aliases), e.g.
   * `code-interpreter` for `code-interpreter-v1`, as E2B's own catalog has it.
   */
  aliases: z.array(z.string()).default([]),
  user: z.string().default("user"),
  workdir: z.string().default("/home/user"),
  env: z.record(z.string(), z.string()).default({}),
  cpuCount: z.number().int().positive().default(2),
  memoryMB: z.number().int().positive().default(1024),
  diskSizeMB: z.number().int().positive().default(2048),
  createdAt: z.string().optional(),
  updatedAt: z.string().optional(),
  /** Folder of the current revision's root filesystem, relative to the template folder. */
  rootfsDir: z.string().default("rootfs"),
  /** Started when the warm image is taken, so it is already running in every sandbox. */
  startCmd: z.string().optional(),
  /** Polled before the warm image is taken; exit 0 means ready. */
  readyCmd: z.string().optional(),
  /** Where the tree came from: an image reference (with its digest) or another template. */
  fromImage: z.string().optional(),
  imageDigest: z.string().optional(),
  fromTemplate: z.string().optional(),
  buildId: z.string().default("local"),
  buildStatus: BuildState.default("ready"),
  reason: z.object({ message: z.string(), step: z.string().optional() }).optional(),
  buildCount: z.number().int().nonnegative().default(1),
  /**
   * E2B's `public` flag, as PATCH /templates/{id} sets it: other API keys may start it (a
   * template without an owner, the operator's, is started by every key).
   */
  public: z.boolean().default(false),
  /** The API key that built it (absent: the operator's, or an image started on demand). */
  owner: z.string().max(64).optional(),
  /** Whether sandboxes start from a warm image (false for the templates behind cold starts). */
  warm: z.boolean().default(true),
  /** An image started on demand: the image cache may evict it when no sandbox uses it. */
  onDemand: z.boolean().default(false),
  /** The tree as an index (tree-index.ts): the file beside template.json and its sha256. */
  treeIndex: z.object({ file: z.string(), sha256: z.string() }).optional(),
  /**
   * The tree is served by aenv-lazyfs from its index, content fetched from the image's holders
   * or, with `runs` (a file beside the index saying where each file is in which layer), read by
   * range from the image's eStargz layers. Dropped once the content is all here and the tree
   * settled into a plain one under the same path (templates/lazy-settle.ts).
   */
  lazy: z.object({ digest: z.string(), runs: z.string().optional() }).optional(),
  /**
   * E2B tags (`name:tag`); each names the build it was given to. A tag on an older build
   * starts that build's tree and settings (`builds/<buildId>.template.json`, see recordBuild).
   */
  tags: z.array(z.object({ tag: z.string(), buildId: z.string(), createdAt: z.string() })).default([]),
});

export type TemplateData = z.infer<typeof TemplateFile>;
/** What save() takes: fields with defaults may be left out. */
export type TemplateInput = z.input<typeof TemplateFile>;
export type Template = TemplateData & { rootfs: string; dir: string };

/** A template can start sandboxes once a build has produced its root filesystem. */
export function usable(t: Template): boolean {
  return existsSync(t.rootfs);
}

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export function validTemplateName(name: string): boolean {
  return NAME_RE.test(name);
}

/** PATH of templates and build steps whose image sets none. */
export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** IDs and build IDs used as file names. */
const SAFE_NAME = /^[A-Za-z0-9_.-]+$/;

/** A template.json (or a kept build's copy); a half-written or foreign file is none. */
function readTemplateFile(file: string): TemplateData | undefined {
  if (!existsSync(file)) return undefined;
  try {
    return TemplateFile.parse(JSON.parse(readFileSync(file, "utf8")));
  } catch {
    return undefined;
  }
}

/** Writes JSON under a temp name, then renames it: readers never see half a file. */
function writeAtomic(dir: string, name: string, data: unknown): void {
  writeFileDurableSync(join(dir, name), JSON.stringify(data, null, 2));
}

/**
 * Templates on local disk: TEMPLATES_DIR/<id>/{template.json, <rootfsDir>/}. Every rebuild
 * gets a new rootfs folder (rootfs-r<revision>), so paused sandboxes and snapshots of an
 * older revision keep the exact tree they were taken on.
 */
export class TemplateStore {
  /** Parsed template.json files by folder, with the file version they were read from. */
  private readonly parsed = new Map<string, { version: string; t: Template }>();
  private scanned: { at: number; list: Template[] } | undefined;

  constructor(readonly dir: string) {}

  /** By ID, name, alias, or `name:tag` (`alias:tag`). An ID wins over a name, a name over an alias. */
  get(ref: string): Template | undefined {
    // An ID is its folder's name: one read, not a scan (a node may hold thousands of images).
    const byId = SAFE_NAME.test(ref) ? this.read(ref) : undefined;
    if (byId?.id === ref) return structuredClone(byId);
    const all = this.scan();
    const named = (name: string) =>
      all.find((t) => t.id === name) ?? all.find((t) => t.name === name) ?? all.find((t) => t.aliases.includes(name));
    const direct = named(ref);
    if (direct) return structuredClone(direct);
    const i = ref.lastIndexOf(":");
    if (i <= 0) return undefined;
    const [name, tag] = [ref.slice(0, i), ref.slice(i + 1)];
    const t = named(name);
    const buildId = t?.tags.find((x) => x.tag === tag)?.buildId;
    if (!t || !buildId) return undefined;
    return buildId === t.buildId ? structuredClone(t) : this.readBuild(t, buildId);
  }

  /**
   * Keeps a ready build's settings (its tree stays in its rootfs folder), so tags given to
   * it still start exactly it after the template is rebuilt.
   */
  recordBuild(t: Template): void {
    if (t.buildStatus !== "ready" || !SAFE_NAME.test(t.buildId)) return;
    const { dir: _d, rootfs: _r, ...data } = t;
    writeAtomic(join(t.dir, "builds"), `${t.buildId}.template.json`, data);
  }

  /** An older build of a template, as it was when ready; its tags are the template's. */
  private readBuild(t: Template, buildId: string): Template | undefined {
    if (!SAFE_NAME.test(buildId)) return undefined;
    const b = readTemplateFile(join(t.dir, "builds", `${buildId}.template.json`));
    if (!b || b.id !== t.id) return undefined;
    return { ...b, name: t.name, aliases: t.aliases, tags: t.tags, dir: t.dir, rootfs: join(t.dir, b.rootfsDir) };
  }

  /** Every template folder, including ones still building or failed. */
  list(): Template[] {
    return this.scan().map((t) => structuredClone(t));
  }

  /**
   * Every template as parsed (shared: callers outside this class get copies). Scanned again at
   * most once a second (a stat per template: ~25 ms for 2,000 on this host) unless this store
   * wrote or removed one since; another process's change is seen within that second, and at
   * once by ID.
   */
  private scan(): Template[] {
    const now = Date.now();
    if (this.scanned && now - this.scanned.at < 1000) return this.scanned.list;
    const list = this.scanDir();
    this.scanned = { at: now, list };
    return list;
  }

  private scanDir(): Template[] {
    if (!existsSync(this.dir)) return [];
    const out: Template[] = [];
    const names = readdirSync(this.dir).filter((n) => !n.startsWith("."));
    for (const name of names) {
      const t = this.read(name);
      if (t) out.push(t);
    }
    if (this.parsed.size > names.length) {
      const present = new Set(names);
      for (const k of this.parsed.keys()) if (!present.has(k)) this.parsed.delete(k);
    }
    return out;
  }

  /**
   * A folder's template.json, parsed once per version of the file: a lookup by name scans
   * every template, and reading and validating thousands of files took ~40 µs each. The file is
   * only ever replaced by a rename, so its inode, size and mtime say whether it changed, also
   * when another process on this host wrote it. Shared: what leaves this class is a copy.
   */
  private read(id: string): Template | undefined {
    const file = join(this.dir, id, "template.json");
    const st = statSync(file, { throwIfNoEntry: false, bigint: true });
    if (!st) {
      // Gone since it was read: the last scan that listed it is stale too.
      if (this.parsed.delete(id)) this.scanned = undefined;
      return undefined;
    }
    const version = `${st.ino}:${st.size}:${st.mtimeNs}`;
    let hit = this.parsed.get(id);
    if (hit?.version !== version) {
      const t = readTemplateFile(file);
      if (!t) return undefined;
      hit = { version, t: { ...t, dir: join(this.dir, id), rootfs: join(this.dir, id, t.rootfsDir) } };
      this.parsed.set(id, hit);
    }
    return hit.t;
  }

  /** Writes template.json atomically (temp name, rename). */
  save(t: TemplateInput): Template {
    const dir = join(this.dir, t.id);
    const data = TemplateFile.parse({ ...t, updatedAt: new Date().toISOString() });
    writeAtomic(dir, "template.json", data);
    this.scanned = undefined;
    return { ...data, dir, rootfs: join(dir, data.rootfsDir) };
  }

  /** Removes a template's folder (every revision). */
  remove(id: string): void {
    if (!SAFE_NAME.test(id)) return;
    this.parsed.delete(id);
    this.scanned = undefined;
    detachMountsUnder(join(this.dir, id));
    rmSync(join(this.dir, id), { recursive: true, force: true });
  }
}
