import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { PeerFiles } from "../api/routes/peers.js";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { TemplateStore } from "../state/template-catalog.js";
import { ContentStore, ImageStore, metaOfKey, type PeerBlobs } from "../storage/images/index.js";
import { registerImageCache } from "../telemetry/prometheus.js";
import { TemplateBuilder } from "../templates/builder.js";
import { ContextFiles } from "../templates/context-files.js";
import { ImageCache } from "../templates/image-cache.js";
import { imageProvider } from "../templates/image-provider.js";
import { LAZYFS_BINARY, LazyTrees, type TreePeers } from "../templates/lazy-trees.js";
import { OnDemandImages } from "../templates/on-demand.js";
import type { TemplateSync } from "../templates/sync.js";
import type { PathGate } from "../util/path-gate.js";
import type { Component } from "./component.js";

export interface Builds extends Component {
  builder: TemplateBuilder;
  files: ContextFiles;
  onDemand: OnDemandImages;
  cache: ImageCache;
  images: ImageStore;
  /** What this node serves its peers (cluster.p2p). */
  peerFiles: Omit<PeerFiles, "chunk" | "pause">;
  /**
   * Layers from the cluster's other nodes first; the cache unpublishes the blobs it drops; with
   * `lazy`, an image another node holds starts from its tree before the content is here.
   */
  usePeers(peers: PeerBlobs & TreePeers & { forget(digest: string): void }, lazy: boolean): Promise<void>;
}

export interface BuildsDeps {
  cfg: ServerConfig;
  paths: NodePaths;
  templates: TemplateStore;
  orch: Orchestrator;
  sync?: TemplateSync;
  /** Held by sandbox starts on template trees (the runtime's); lazy trees settle under it. */
  rootfsGate: PathGate;
  log: Logger;
}

/**
 * Template builds: their uploaded build contexts, the image store they pull from, the builder;
 * images started on demand and the byte limit of the templates folder.
 */
export async function startBuilds({ cfg, paths, templates, orch, sync, rootfsGate, log }: BuildsDeps): Promise<Builds> {
  const files = new ContextFiles(
    paths.contextFiles,
    createHash("sha256").update(`upload-links\n${cfg.apiKey}`).digest("hex"),
    cfg.images.uploadLimitBytes,
  );
  // Blobs are content-addressed and written atomically: every data dir on the host shares them.
  const images = new ImageStore({
    dir: paths.imageBlobs,
    insecureRegistries: cfg.images.insecureRegistries,
    allowPrivateRegistries: cfg.images.allowPrivateRegistries,
    fetchTimeoutMs: cfg.images.fetchTimeoutMs,
    maxManifestBytes: cfg.images.maxManifestBytes,
    maxImageBytes: cfg.images.maxImageBytes,
    maxUnpackedBytes: cfg.images.maxUnpackedBytes,
    maxUnpackedEntries: cfg.images.maxUnpackedEntries,
    ...(cfg.images.authFile ? { authFile: cfg.images.authFile } : {}),
    log: (msg) => log.child({ component: "images" }).info(msg),
  });
  const builder = new TemplateBuilder({
    templates,
    orch,
    files,
    images: imageProvider(images),
    ...(sync ? { sync } : {}),
    allowHostImageSources: cfg.images.allowHostSources,
    buildTimeoutMs: cfg.images.buildTimeoutMs,
    log: log.child({ component: "builds" }),
  });
  const content = new ContentStore(join(paths.imageBlobs, "files"));
  let onDemand: OnDemandImages | undefined;
  let treePeers: TreePeers | undefined;
  let lazyTrees: LazyTrees | undefined;
  const cache = new ImageCache({
    dir: paths.templatesDir,
    blobDir: paths.imageBlobs,
    content,
    maxBytes: cfg.images.cacheMaxBytes,
    evictable: () =>
      templates
        .list()
        .filter(
          (t) =>
            t.onDemand && t.buildStatus === "ready" && !orch.templateInUse(t.id) && !(onDemand?.busy(t.id) ?? false),
        ),
    evict: async (id) => {
      const t = templates.get(id);
      await builder.delete(id);
      if (t?.imageDigest && t.treeIndex) treePeers?.forgetTree(t.imageDigest);
    },
    log: log.child({ component: "image-cache" }),
  });
  await cache.init();
  registerImageCache(() => ({ used: cache.usedBytes, max: cache.maxBytes }));
  onDemand = new OnDemandImages({
    templates,
    images,
    content,
    cache,
    prefixes: cfg.images.onDemand,
    allowHostSources: cfg.images.allowHostSources,
    log: log.child({ component: "images" }),
  });
  if (cfg.images.lazy && existsSync(LAZYFS_BINARY)) {
    lazyTrees = new LazyTrees({
      templates,
      content,
      cache,
      gate: rootfsGate,
      originOf: (t) => onDemand?.registryOrigin(t),
      socketPath: join(paths.dataDir, "lazyfs.sock"),
      log: log.child({ component: "lazy-trees" }),
    });
    await lazyTrees.start();
    onDemand.useLazy(lazyTrees);
  }
  const peerFiles: Omit<PeerFiles, "chunk" | "pause"> = {
    blob: (digest) => images.blobs.path(digest),
    treeIndex: (digest) => {
      const t = templates.list().find((x) => x.imageDigest === digest && x.treeIndex);
      return t?.treeIndex ? join(t.dir, t.treeIndex.file) : undefined;
    },
    content: (key) => (metaOfKey(key) ? content.entryPath(key) : undefined),
  };
  return {
    builder,
    files,
    onDemand,
    cache,
    images,
    peerFiles,
    async usePeers(peers, lazy) {
      images.usePeers(peers);
      treePeers = peers;
      cache.onBlobDropped = (digest) => peers.forget(digest);
      // Without `lazy` (cluster.p2p's own switch) no tree is started from a peer's.
      if (lazy) lazyTrees?.usePeers(peers);
      onDemand?.usePeers(peers);
    },
    stop: async () => {
      await builder.close();
      await lazyTrees?.stop();
    },
  };
}
