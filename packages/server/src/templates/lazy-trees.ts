import { spawn } from "node:child_process";
import { chmodSync, existsSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import type { Template, TemplateStore } from "../state/template-catalog.js";
import { type ContentStore, metaOfKey } from "../storage/images/index.js";
import { mountPoints } from "../util/mounts.js";
import type { PathGate } from "../util/path-gate.js";
import { rendezvous } from "../util/rendezvous.js";
import type { ImageCache } from "./image-cache.js";
import { settledBeforeRestart, settleLazyTree } from "./lazy-settle.js";
import { keysOf, parseIndex, type TreeIndex } from "./tree-index.js";

/** A node that holds an image's whole tree: its index and every file's content. */
export interface TreeHolder {
  name: string;
  /** sha256 (hex) of the index it serves, as it published it. */
  indexSha256: string;
  /** `/cluster/images/{digest}/index` or `/cluster/content/{key}` of that node. */
  get(path: string): Promise<Readable>;
}

/** Where a lazy tree's content comes from: the places to ask for a key, in order. */
export interface ContentOrigin {
  sources(key: string): Promise<Array<{ name: string; open(): Promise<AsyncIterable<Buffer>> }>>;
}

/** A tree's content from the nodes that hold the whole tree, each key asked in rendezvous order. */
function peerOrigin(peers: TreePeers, imageDigest: string): ContentOrigin {
  return {
    async sources(key) {
      return rendezvous(await peers.treeHolders(imageDigest), key).map((h) => ({
        name: h.name,
        open: () => h.get(`/cluster/content/${key}`),
      }));
    },
  };
}

/** The cluster's index of image trees (cluster/peer-blobs.ts over Redis). */
export interface TreePeers {
  treeHolders(imageDigest: string): Promise<TreeHolder[]>;
  publishTree(imageDigest: string, indexSha256: string): void;
  forgetTree(imageDigest: string): void;
}

/** The FUSE server, built beside the server's JavaScript (native/build.mjs). */
export const LAZYFS_BINARY = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist", "native", "aenv-lazyfs");

const FILL_CONCURRENCY = 4;

interface Tree {
  template: string;
  digest: string;
  sizes: Map<string, number>;
  origin: ContentOrigin;
}

/**
 * Image trees started before their content is here. A tree is mounted by aenv-lazyfs from its
 * index; the first open of a file asks this server (over a unix socket) for its content key,
 * which is fetched from a node that holds the tree, verified against the key's sha256 and
 * stored in the content store; a fill in the background fetches the rest, largest first. The
 * mount outlives a crash of this server (the FUSE server runs on its own), and a restart
 * mounts again what is not mounted. Once all its content is here the tree settles into a
 * plain one under the same path (lazy-settle.ts) and its FUSE server goes with the last
 * sandbox started on it.
 */
export class LazyTrees {
  private server: Server | undefined;
  private readonly trees = new Map<string, Tree>();
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly fills = new Set<Promise<void>>();
  private closed = false;
  private peers: TreePeers | undefined;

  constructor(
    private readonly d: {
      templates: TemplateStore;
      content: ContentStore;
      cache: ImageCache;
      /** Held by sandbox starts on a tree's path; a tree settles under it (lazy-settle.ts). */
      gate: PathGate;
      /** The origin of a tree mounted again after a restart that its holders do not serve (an eStargz image's registry). */
      originOf?: (t: Template) => ContentOrigin | undefined;
      socketPath: string;
      binary?: string;
      log: Logger;
    },
  ) {}

  /** In a cluster with p2p: trees are published when complete, and peers' trees can be served. */
  usePeers(peers: TreePeers): void {
    this.peers = peers;
  }

  /** Content from the nodes holding image `digest`'s whole tree (none without p2p). */
  fromHolders(digest: string): ContentOrigin {
    const peers = this.peers;
    return peers ? peerOrigin(peers, digest) : { sources: async () => [] };
  }

  get binary(): string {
    return this.d.binary ?? LAZYFS_BINARY;
  }

  /** Listens for the FUSE servers' fetches and mounts again the lazy trees that are not mounted. */
  async start(): Promise<void> {
    rmSync(this.d.socketPath, { force: true });
    this.server = createServer((req, res) => {
      const u = new URL(req.url ?? "/", "http://lazyfs");
      const key = u.searchParams.get("key") ?? "";
      const tree = u.searchParams.get("tree") ?? "";
      if (req.method !== "POST" || u.pathname !== "/fetch" || !metaOfKey(key)) {
        res.writeHead(400).end("bad request");
        return;
      }
      this.fetch(tree, key).then(
        () => res.writeHead(200).end("ok"),
        (err: Error) => res.writeHead(502).end(err.message),
      );
    });
    await new Promise<void>((resolve, reject) => {
      this.server?.once("error", reject);
      this.server?.listen(this.d.socketPath, () => resolve());
    });
    // Only root (the FUSE servers) asks for content.
    chmodSync(this.d.socketPath, 0o600);
    const mounted = mountPoints();
    for (const t of this.d.templates.list()) {
      if (!t.lazy || !t.treeIndex) continue;
      const index = join(t.dir, t.treeIndex.file);
      if (!existsSync(index)) continue;
      if (settledBeforeRestart(this.d, t)) continue;
      const idx = parseIndex(readFileSync(index));
      this.track(t, t.lazy.digest, idx, this.d.originOf?.(t) ?? this.fromHolders(t.lazy.digest));
      if (!mounted.has(t.rootfs)) await this.mount(t, index);
      this.fillInBackground(t.id, idx, []);
    }
  }

  async stop(): Promise<void> {
    this.closed = true;
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    await Promise.all(this.fills);
  }

  /**
   * Serves `t`'s tree from `indexFile` at its rootfs path, content fetched from `origin` when a
   * file is first opened; in the background `first` is fetched, then the rest, largest first.
   */
  async serve(
    t: Template,
    digest: string,
    idx: TreeIndex,
    indexFile: string,
    origin: ContentOrigin,
    first: string[] = [],
  ): Promise<void> {
    this.track(t, digest, idx, origin);
    await this.mount(t, indexFile);
    this.fillInBackground(t.id, idx, first);
  }

  private track(t: Template, digest: string, idx: TreeIndex, origin: ContentOrigin): void {
    const sizes = new Map<string, number>();
    for (const e of idx.entries) if (e.k) sizes.set(e.k, e.s);
    this.trees.set(t.id, { template: t.id, digest, sizes, origin });
  }

  private async mount(t: Template, indexFile: string): Promise<void> {
    const log = openSync(join(t.dir, `lazyfs-${t.rootfsDir}.log`), "a");
    const child = spawn(
      this.binary,
      [
        "-index",
        indexFile,
        "-content",
        this.d.content.root,
        "-fetch",
        this.d.socketPath,
        "-tree",
        t.id,
        "-mount",
        t.rootfs,
      ],
      // Its own session: the mount outlives this process (a crash, a restart).
      { detached: true, stdio: ["ignore", log, log] },
    );
    child.unref();
    const deadline = Date.now() + 10_000;
    while (!mountPoints().has(t.rootfs)) {
      if (child.exitCode !== null || Date.now() > deadline) {
        throw new Error(`aenv-lazyfs did not mount ${t.rootfs} (see ${join(t.dir, `lazyfs-${t.rootfsDir}.log`)})`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Content `key` of tree `treeId` in the content store, from a holder of the tree. */
  fetch(treeId: string, key: string): Promise<void> {
    let p = this.inflight.get(key);
    if (!p) {
      p = this.fetchOnce(treeId, key).finally(() => this.inflight.delete(key));
      this.inflight.set(key, p);
    }
    return p;
  }

  private async fetchOnce(treeId: string, key: string): Promise<void> {
    if (await this.d.content.has(key)) return;
    const tree = this.trees.get(treeId);
    const size = tree?.sizes.get(key);
    if (!tree || size === undefined) throw new Error(`no lazy tree ${treeId} has content ${key.slice(0, 12)}`);
    for (const src of await tree.origin.sources(key)) {
      const done = await this.d.cache.room(Math.ceil(size / 4096) * 4096);
      let added = 0;
      try {
        added = await this.d.content.adopt(await src.open(), key, size);
        return;
      } catch (err) {
        this.d.log.warn({ from: src.name, key: key.slice(0, 12), err: (err as Error).message }, "content refused");
      } finally {
        done(added);
      }
    }
    throw new Error(`no source sent content ${key.slice(0, 12)} of image ${tree.digest}`);
  }

  private fillInBackground(treeId: string, idx: TreeIndex, first: string[]): void {
    const firstSet = new Set(first);
    const keys = [...first.map((key) => ({ key })), ...keysOf(idx).filter((k) => !firstSet.has(k.key))];
    const p = (async () => {
      const t0 = Date.now();
      let next = 0;
      let failed = 0;
      const worker = async () => {
        while (next < keys.length && !this.closed) {
          const { key } = keys[next++] as { key: string };
          await this.fetch(treeId, key).catch(() => failed++);
        }
      };
      await Promise.all(Array.from({ length: FILL_CONCURRENCY }, worker));
      if (this.closed) return;
      const tree = this.trees.get(treeId);
      if (failed === 0 && tree) {
        this.d.log.info({ template: treeId, files: keys.length, ms: Date.now() - t0 }, "lazy image content complete");
        const t = this.d.templates.get(treeId);
        if (t?.treeIndex) this.peers?.publishTree(tree.digest, t.treeIndex.sha256);
        if (t?.lazy && !this.closed) await settleLazyTree(this.d, t, idx, (key) => this.fetch(treeId, key));
      } else if (failed > 0) {
        this.d.log.warn({ template: treeId, failed }, "lazy image content incomplete; files are fetched when opened");
      }
    })().finally(() => this.fills.delete(p));
    this.fills.add(p);
  }
}
