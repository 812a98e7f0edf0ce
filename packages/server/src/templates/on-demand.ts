import { createHash } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { InvalidRequestError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import { newTemplateId } from "../state/ids.js";
import { DEFAULT_PATH, type Template, type TemplateStore, usable } from "../state/template-catalog.js";
import { type ContentStore, ImagePullError, type ImageStore, isHostPathSource } from "../storage/images/index.js";
import { countImageRequest } from "../telemetry/prometheus.js";
import { writeFileDurableSync } from "../util/durable-write.js";
import { readAll } from "../util/read-all.js";
import type { ImageCache } from "./image-cache.js";
import { hasAccount } from "./import.js";
import type { ContentOrigin, LazyTrees, TreePeers } from "./lazy-trees.js";
import { FileRuns, NotSeekable, readRun, type SeekableTree, seekableTree } from "./seekable-tree.js";
import { indexTree, parseIndex, type TreeIndex, treeConfig } from "./tree-index.js";

export interface OnDemandDeps {
  templates: TemplateStore;
  images: ImageStore;
  content: ContentStore;
  cache: ImageCache;
  /** Reference prefixes a create may name as its template (images.on_demand); `*` is any. */
  prefixes: string[];
  allowHostSources: boolean;
  log: Logger;
}

/** The template name an image started on demand is kept under. */
export const onDemandName = (ref: string) => `image-${createHash("sha256").update(ref).digest("hex").slice(0, 16)}`;

/**
 * Images started without an import: the first start of an image on this node pulls it (layers
 * the node holds are not fetched again) and unpacks it through the content store, so what it
 * shares with images already here costs no disk; later starts find its template at once. The
 * template boots cold (no warm image) and is the image cache's to evict when unused.
 */
export class OnDemandImages {
  private readonly inflight = new Map<string, Promise<Template>>();
  private peers: TreePeers | undefined;
  private lazy: LazyTrees | undefined;

  constructor(private readonly d: OnDemandDeps) {}

  /** With `images.lazy`: eStargz images (and, with peers, other nodes' trees) start before their content is here. */
  useLazy(lazy: LazyTrees): void {
    this.lazy = lazy;
  }

  /** In a cluster with p2p: trees are published, and started from other nodes' trees. */
  usePeers(peers: TreePeers): void {
    this.peers = peers;
  }

  /** Reads the files of lazy template `t` from its image's eStargz layers (after a restart). */
  registryOrigin(t: Template): ContentOrigin | undefined {
    if (!t.lazy?.runs || !t.fromImage) return undefined;
    const runs = FileRuns.parse(JSON.parse(readFileSync(join(t.dir, t.lazy.runs), "utf8")));
    return this.layersOrigin(t.fromImage, t.lazy.digest, runs);
  }

  /** A key's bytes from a node holding the whole tree first (with p2p), else by range from its layer. */
  private layersOrigin(ref: string, digest: string, runs: FileRuns): ContentOrigin {
    const ranges = this.d.images.ranges(ref);
    const holders = this.lazy?.fromHolders(digest);
    return {
      async sources(key) {
        const run = runs[key];
        const peers = holders ? await holders.sources(key) : [];
        return run ? [...peers, { name: "registry", open: async () => readRun(ranges, run) }] : peers;
      },
    };
  }

  /** Whether a create's template names an image this node may pull (and no template has that name). */
  resolves(templateRef: string): boolean {
    // The rule first: a create naming a template pays no catalog read here.
    if (!this.d.prefixes.some((p) => p === "*" || templateRef.startsWith(p))) return false;
    if (isHostPathSource(templateRef)) return false;
    return !this.d.templates.get(templateRef);
  }

  /**
   * The layers of image `ref` (its manifest, read from the registry or the store), for a
   * gateway to place its first start where most of them are already held.
   */
  async layers(ref: string): Promise<Array<{ digest: string; size: number }>> {
    if (isHostPathSource(ref)) throw new InvalidRequestError(`image '${ref}' names a path on the server's host`);
    try {
      return await this.d.images.layers(ref);
    } catch (err) {
      // As a start of the image would answer: the reference is the caller's to fix.
      if (err instanceof ImagePullError) throw new InvalidRequestError(`image '${ref}': ${err.message}`);
      throw err;
    }
  }

  /** Imports on demand right now (their references), for the cache's eviction to leave alone. */
  busy(id: string): boolean {
    return [...this.inflight.keys()].some((ref) => this.d.templates.get(onDemandName(ref))?.id === id);
  }

  /** The template of image `ref`, pulled and unpacked here on first use. */
  template(ref: string): Promise<Template> {
    if (isHostPathSource(ref) && !this.d.allowHostSources) {
      throw new InvalidRequestError(
        `image '${ref}' names a path on the server's host; only registry images are accepted here ` +
          "(an operator may allow host paths with images.allow_host_sources / AENV_ALLOW_HOST_IMAGE_SOURCES)",
      );
    }
    const name = onDemandName(ref);
    const existing = this.d.templates.get(name);
    if (existing && usable(existing) && existing.fromImage === ref && existing.buildStatus === "ready") {
      this.d.cache.touch(existing.id);
      countImageRequest(true);
      return Promise.resolve(existing);
    }
    let p = this.inflight.get(ref);
    if (!p) {
      p = this.pull(ref, name, existing).finally(() => this.inflight.delete(ref));
      this.inflight.set(ref, p);
    }
    return p;
  }

  private async pull(ref: string, name: string, existing: Template | undefined): Promise<Template> {
    const t0 = Date.now();
    const id = existing?.id ?? newTemplateId();
    const revision = (existing?.revision ?? 0) + 1;
    const rootfsDir = `rootfs-r${revision}`;
    const dest = join(this.d.templates.dir, id, rootfsDir);
    const lazy = await this.fromPeers(ref, name, id, revision, existing).catch((err: Error) => {
      this.d.log.warn({ image: ref, err: err.message }, "image not started from a peer's tree; pulling it");
      this.d.templates.remove(id);
      return undefined;
    });
    if (lazy) return lazy;
    const seekable = await this.fromLayers(ref, name, id, revision, existing).catch((err: Error) => {
      this.d.log.warn({ image: ref, err: err.message }, "image not started from its eStargz layers; pulling it");
      this.d.templates.remove(id);
      return undefined;
    });
    if (seekable) return seekable;
    try {
      const img = await this.d.images.pull(ref, undefined, this.d.cache);
      const stats = await this.d.cache.pinning(
        img.layers.map((l) => l.digest),
        () => this.d.images.unpack(img, dest, undefined, { store: this.d.content, budget: this.d.cache }),
      );
      const config = treeConfig(img.config);
      const user = config.user || "root";
      if (user !== "root" && user !== "0" && !hasAccount(dest, user)) {
        this.d.templates.remove(id);
        throw new InvalidRequestError(`image ${ref} has no account '${user}' (set the image's User)`);
      }
      const treeIndex = this.peers ? await this.writeIndex(dest, revision, stats.keysByIno, config) : undefined;
      const t = this.d.templates.save({
        ...onDemandRecord({ ref, name, id, revision, existing, digest: img.digest }, config),
        ...(treeIndex ? { treeIndex } : {}),
      });
      this.d.cache.touch(t.id);
      if (treeIndex) this.peers?.publishTree(img.digest, treeIndex.sha256);
      countImageRequest(false, img.transfer.bytesFetched);
      this.d.log.info(
        {
          image: ref,
          template: t.id,
          ms: Date.now() - t0,
          fetchedBytes: img.transfer.bytesFetched,
          newBytes: stats.newBytes,
          sharedFiles: stats.sharedFiles,
          files: stats.files,
        },
        "image started on demand",
      );
      return t;
    } catch (err) {
      if (!existing) this.d.templates.remove(id);
      if (err instanceof ImagePullError) {
        throw new InvalidRequestError(`image '${ref}' cannot be started: ${err.message}`);
      }
      throw err;
    }
  }

  /** Writes the tree's index beside its template (what peers start the image from). */
  private async writeIndex(
    rootfs: string,
    revision: number,
    keysByIno: Map<number, string>,
    config: TreeIndex["config"],
  ): Promise<{ file: string; sha256: string } | undefined> {
    const idx = await indexTree(rootfs, keysByIno, config);
    if (!idx) return undefined;
    const raw = Buffer.from(JSON.stringify(idx));
    const file = `index-r${revision}.json`;
    writeFileDurableSync(join(dirname(rootfs), file), raw);
    return { file, sha256: createHash("sha256").update(raw).digest("hex") };
  }

  /**
   * The image started from a tree another node holds, before its content is here: the index
   * is fetched (checked against the sha256 its holder published, and parsed strictly), the
   * tree mounted by aenv-lazyfs. Undefined when no node holds the image (or lazy is off).
   */
  private async fromPeers(
    ref: string,
    name: string,
    id: string,
    revision: number,
    existing: Template | undefined,
  ): Promise<Template | undefined> {
    if (!this.lazy || !this.peers) return undefined;
    const t0 = Date.now();
    const digest = await this.d.images.resolve(ref);
    const holders = await this.peers.treeHolders(digest);
    let found: { raw: Buffer; idx: TreeIndex; sha256: string } | undefined;
    for (const h of holders) {
      try {
        const raw = await readAll(await h.get(`/cluster/images/${digest}/index`), MAX_INDEX_BYTES);
        const sha256 = createHash("sha256").update(raw).digest("hex");
        if (sha256 !== h.indexSha256) throw new Error("index digest mismatch");
        found = { raw, idx: parseIndex(raw), sha256 };
        break;
      } catch (err) {
        this.d.log.warn({ image: ref, holder: h.name, err: (err as Error).message }, "tree index refused from peer");
      }
    }
    if (!found) return undefined;
    const t = await this.startLazy(
      { ref, name, id, revision, existing, digest },
      found.raw,
      found.idx,
      this.lazy.fromHolders(digest),
      [],
    );
    this.d.log.info(
      { image: ref, template: t.id, ms: Date.now() - t0, entries: found.idx.entries.length },
      "image started on demand from a peer's tree",
    );
    return t;
  }

  /**
   * An eStargz image started before its content is here: its tree is built from the layers'
   * TOCs (two range requests a layer), mounted by aenv-lazyfs, and each file read by range from
   * its layer when first opened (from a peer holding the whole tree first, with p2p); the files
   * the layers mark to prefetch come first in the background fill. Undefined when a layer is not
   * eStargz, or lazy is off.
   */
  private async fromLayers(
    ref: string,
    name: string,
    id: string,
    revision: number,
    existing: Template | undefined,
  ): Promise<Template | undefined> {
    if (!this.lazy) return undefined;
    const t0 = Date.now();
    const img = await this.d.images.seekable(ref);
    if (!img) return undefined;
    let tree: SeekableTree;
    try {
      tree = seekableTree(img);
    } catch (err) {
      if (err instanceof NotSeekable) {
        this.d.log.info({ image: ref, why: err.message }, "eStargz image not served lazily");
        return undefined;
      }
      throw err;
    }
    const raw = Buffer.from(JSON.stringify(tree.index));
    const runsFile = `runs-r${revision}.json`;
    mkdirSync(join(this.d.templates.dir, id), { recursive: true, mode: 0o755 });
    writeFileDurableSync(join(this.d.templates.dir, id, runsFile), Buffer.from(JSON.stringify(tree.runs)));
    const t = await this.startLazy(
      { ref, name, id, revision, existing, digest: img.digest, runs: runsFile },
      raw,
      tree.index,
      this.layersOrigin(ref, img.digest, tree.runs),
      tree.prefetch,
    );
    this.d.log.info(
      {
        image: ref,
        template: t.id,
        ms: Date.now() - t0,
        entries: tree.index.entries.length,
        prefetch: tree.prefetch.length,
      },
      "image started on demand from its eStargz layers",
    );
    return t;
  }

  /** Saves the template of a lazy tree and mounts it. */
  private async startLazy(
    at: OnDemandAt & { runs?: string },
    raw: Buffer,
    idx: TreeIndex,
    origin: ContentOrigin,
    first: string[],
  ): Promise<Template> {
    const lazy = this.lazy as LazyTrees;
    const rootfsDir = `rootfs-r${at.revision}`;
    const dir = join(this.d.templates.dir, at.id);
    mkdirSync(join(dir, rootfsDir), { recursive: true, mode: 0o755 });
    const file = `index-r${at.revision}.json`;
    writeFileDurableSync(join(dir, file), raw);
    const t = this.d.templates.save({
      ...onDemandRecord(at, idx.config),
      treeIndex: { file, sha256: createHash("sha256").update(raw).digest("hex") },
      lazy: { digest: at.digest, ...(at.runs ? { runs: at.runs } : {}) },
    });
    await lazy.serve(t, at.digest, idx, join(dir, file), origin, first);
    this.d.cache.touch(t.id);
    countImageRequest(false);
    return t;
  }
}

/** Where and as what image `at.ref` is started on demand. */
interface OnDemandAt {
  ref: string;
  name: string;
  id: string;
  revision: number;
  existing: Template | undefined;
  digest: string;
}

/**
 * The catalog record of an image started on demand, however its tree came (unpacked, a peer's,
 * its eStargz layers): the config's user, workdir and env, the on-demand sizes, booted cold.
 */
function onDemandRecord(at: OnDemandAt, config: TreeIndex["config"]) {
  const user = config.user || "root";
  return {
    id: at.id,
    name: at.name,
    revision: at.revision,
    rootfsDir: `rootfs-r${at.revision}`,
    user,
    workdir: config.workdir || (user === "root" ? "/root" : `/home/${user}`),
    env: { PATH: DEFAULT_PATH, ...config.env },
    cpuCount: 2,
    memoryMB: 1024,
    diskSizeMB: 2048,
    createdAt: at.existing?.createdAt ?? new Date().toISOString(),
    fromImage: at.ref,
    imageDigest: at.digest,
    buildId: `on-demand-r${at.revision}`,
    buildStatus: "ready" as const,
    warm: false,
    onDemand: true,
  };
}

/** An index of a few million entries is a few hundred MB; past this a peer is refused. */
const MAX_INDEX_BYTES = 512 * 1024 * 1024;
