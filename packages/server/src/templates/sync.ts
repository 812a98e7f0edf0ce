import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { templateTreeKey } from "../node-paths.js";
import { type Template, type TemplateData, type TemplateStore, usable } from "../state/template-catalog.js";
import type { ChunkRepository } from "../storage/repository/chunk-repository.js";
import {
  pauseMetaOf,
  snapshotMetaOf,
  type TemplateMeta,
  templateMetaOf,
} from "../storage/repository/manifest-kinds.js";
import type { Manifest } from "../storage/repository/repository.js";
import { UntrustedManifestError } from "../storage/repository/trust.js";
import { publishTree } from "../util/durable-write.js";
import { exec } from "../util/exec.js";

const PREFIX = "tpl-";

/**
 * Built templates in the snapshot repository, so every server sharing it can start them:
 * manifest `tpl-<id>-r<revision>` holds the tree as one tar (content-defined chunks dedup
 * revisions against each other) and the catalog entry. A server that does not know a
 * template fetches it on first use; warm images are per runtime and are taken locally.
 */
export class TemplateSync {
  private readonly fetching = new Map<string, Promise<Template | undefined>>();

  constructor(
    private readonly d: {
      repository: ChunkRepository;
      templates: TemplateStore;
      /** Where a tree is packed for its commit: the node's own (NodePaths.commitStaging). */
      stagingDir: string;
      log: Logger;
    },
  ) {}

  private manifestId(t: Pick<TemplateData, "id" | "revision">): string {
    return `${PREFIX}${t.id}-r${t.revision}`;
  }

  /** Commits a template's current revision, then drops manifests of its older revisions. */
  async commit(t: Template): Promise<void> {
    const t0 = Date.now();
    const tmp = join(this.d.stagingDir, `${t.id}-${randomBytes(4).toString("hex")}`);
    mkdirSync(tmp, { recursive: true });
    try {
      await exec(
        "tar",
        ["--numeric-owner", "--xattrs", "--sort=name", "-C", t.rootfs, "-cf", join(tmp, "rootfs.tar"), "."],
        {
          timeoutMs: 30 * 60_000,
        },
      );
      const { dir: _d, rootfs: _r, ...data } = t;
      writeFileSync(join(tmp, "template.json"), JSON.stringify(data));
      const meta: TemplateMeta = { kind: "template", template: data };
      const { stats } = await this.d.repository.commit(this.manifestId(t), tmp, meta);
      this.d.log.info({ template: t.id, revision: t.revision, ...stats, ms: Date.now() - t0 }, "template committed");
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
    // Older revisions go, except those a paused sandbox or a snapshot in the repository still
    // runs on: any node resuming or starting one fetches that exact tree (fetchTree).
    const inUse = await this.treesInUse();
    for (const m of await this.manifestsOf(t.id)) {
      const old = templateMetaOf(m, this.reject);
      if (!old || old.template.revision >= t.revision) continue;
      if (!inUse.has(`${old.template.id}/${old.template.rootfsDir}`)) await this.d.repository.delete(m.id);
    }
  }

  /** `<id>/<tree>` of every template tree a paused sandbox or snapshot in the repository names. */
  private async treesInUse(): Promise<Set<string>> {
    const out = new Set<string>();
    for (const m of await this.d.repository.list()) {
      const rootfs = pauseMetaOf(m)?.sandbox.rootfs ?? snapshotMetaOf(m)?.rootfs;
      const key = rootfs ? templateTreeKey(rootfs) : undefined;
      if (key) out.add(`${key.id}/${key.tree}`);
    }
    return out;
  }

  /**
   * Commits every usable local template whose current revision the repository lacks: a node
   * that joins a cluster with templates of its own makes them startable and resumable anywhere.
   */
  async commitMissing(): Promise<void> {
    const have = new Set((await this.d.repository.listFresh()).map((m) => m.id));
    for (const t of this.d.templates.list()) {
      if (!usable(t) || have.has(this.manifestId(t))) continue;
      await this.commit(t);
    }
  }

  /**
   * The tree of one template revision (what a paused sandbox or a snapshot from another node
   * runs on), made local from the repository. Only the tree: the catalog entry stays as it is,
   * so an older revision fetched for a resume never replaces the template's current one.
   * False when the repository has no such revision.
   */
  fetchTree(id: string, rootfsDir: string): Promise<boolean> {
    const key = `${id}/${rootfsDir}`;
    let p = this.fetchingTrees.get(key);
    if (!p) {
      p = this.fetchTreeInner(id, rootfsDir).finally(() => this.fetchingTrees.delete(key));
      this.fetchingTrees.set(key, p);
    }
    return p;
  }

  private readonly fetchingTrees = new Map<string, Promise<boolean>>();

  private async fetchTreeInner(id: string, rootfsDir: string): Promise<boolean> {
    const found = (await this.d.repository.listFresh())
      .map((m) => ({ m, meta: templateMetaOf(m, this.reject) }))
      .find(({ meta }) => meta?.template.id === id && meta.template.rootfsDir === rootfsDir);
    if (!found?.meta) return false;
    await this.materializeTree(found.m, found.meta.template);
    this.d.log.info({ template: id, tree: rootfsDir }, "template tree fetched from the repository");
    return true;
  }

  /** Materialises a template manifest's tree into `<templatesDir>/<id>/<rootfsDir>`; returns its catalog entry. */
  private async materializeTree(m: Manifest, data: TemplateData): Promise<TemplateData> {
    const dir = join(this.d.templates.dir, data.id);
    const tmp = join(this.d.templates.dir, `.fetch-${data.id}-${randomBytes(4).toString("hex")}`);
    const tree = join(dir, `${data.rootfsDir}.tmp-${randomBytes(4).toString("hex")}`);
    try {
      await this.d.repository.materialize(m.id, tmp);
      const committed = JSON.parse(readFileSync(join(tmp, "template.json"), "utf8")) as TemplateData;
      // The catalog entry inside names the folders too: it must be the one the manifest was checked as.
      if (committed.id !== data.id || committed.rootfsDir !== data.rootfsDir) {
        throw this.rejectNow(new UntrustedManifestError(m.id, "its template.json is not the template it names"));
      }
      mkdirSync(tree, { recursive: true });
      await exec("tar", ["--numeric-owner", "--xattrs", "-xf", join(tmp, "rootfs.tar"), "-C", tree], {
        timeoutMs: 30 * 60_000,
      });
      rmSync(join(dir, data.rootfsDir), { recursive: true, force: true });
      await publishTree(tree, join(dir, data.rootfsDir));
      return committed;
    } catch (err) {
      rmSync(tree, { recursive: true, force: true });
      throw err;
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }

  /** A template manifest that names paths it must not is logged once and never fetched. */
  private readonly rejected = new Set<string>();
  private readonly reject = (err: UntrustedManifestError): void => {
    if (this.rejected.has(err.message)) return;
    this.rejected.add(err.message);
    this.d.log.error({ entry: err.entry }, `${err.message}; treated as unusable`);
  };

  private async manifestsOf(id: string): Promise<Manifest[]> {
    return (await this.d.repository.list()).filter((m) => m.id.startsWith(`${PREFIX}${id}-r`));
  }

  private rejectNow(err: UntrustedManifestError): UntrustedManifestError {
    this.reject(err);
    return err;
  }

  /** Removes every committed revision of a template. */
  async remove(id: string): Promise<void> {
    for (const m of await this.manifestsOf(id)) await this.d.repository.delete(m.id);
  }

  /** A template another server committed, by ID or name (newest revision), made local. */
  fetch(ref: string): Promise<Template | undefined> {
    let p = this.fetching.get(ref);
    if (!p) {
      p = this.fetchInner(ref).finally(() => this.fetching.delete(ref));
      this.fetching.set(ref, p);
    }
    return p;
  }

  private async fetchInner(ref: string): Promise<Template | undefined> {
    // `name:tag`: the template is fetched, then the tag looked up in its catalog entry.
    const colon = ref.lastIndexOf(":");
    if (colon > 0) {
      const t = await this.fetchInner(ref.slice(0, colon));
      return t ? this.d.templates.get(ref) : undefined;
    }
    const found = (await this.d.repository.listFresh())
      .map((m) => ({ m, meta: templateMetaOf(m, this.reject) }))
      .filter((x): x is { m: Manifest; meta: TemplateMeta } => x.meta !== undefined)
      .filter(({ meta }) => {
        const t = meta.template;
        // A manifest from an older server has no aliases.
        return t.id === ref || t.name === ref || (Array.isArray(t.aliases) && t.aliases.includes(ref));
      })
      .sort((a, b) => b.meta.template.revision - a.meta.template.revision)[0];
    if (!found) return undefined;
    const data = found.meta.template;
    const local = this.d.templates.get(data.id);
    if (local && local.revision >= data.revision) return local;
    const t0 = Date.now();
    const committed = await this.materializeTree(found.m, data);
    const t = this.d.templates.save({ ...committed, buildStatus: "ready", reason: undefined });
    this.d.log.info(
      { template: t.id, revision: t.revision, ms: Date.now() - t0 },
      "template fetched from the repository",
    );
    return t;
  }
}
