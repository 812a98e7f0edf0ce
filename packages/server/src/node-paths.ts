import { realpathSync } from "node:fs";
import { basename, dirname, join, resolve, sep } from "node:path";

const PLAIN = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/;

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return undefined;
  }
};

/**
 * Which template tree a rootfs path names, by content rather than place: the template's ID
 * and its revision's tree folder (`<templatesDir>/<id>/rootfs-r<revision>` on whichever node
 * wrote it). Undefined when the path does not end in two plain components.
 */
export function templateTreeKey(p: string): { id: string; tree: string } | undefined {
  const abs = resolve(p);
  const [id, tree] = [basename(dirname(abs)), basename(abs)];
  return PLAIN.test(id) && PLAIN.test(tree) ? { id, tree } : undefined;
}

/**
 * Every node-local path in one place. The data dir is this server's (state, sandboxes,
 * snapshots); the templates dir may be shared by several servers on a host (trees, warm
 * images, image blobs), so what lives there is safe to share.
 */
export class NodePaths {
  readonly templatesDir: string;

  constructor(
    readonly dataDir: string,
    templatesDir?: string,
  ) {
    this.templatesDir = templatesDir ?? join(dataDir, "templates");
  }

  // ---- data dir: this server's own
  get secrets(): string {
    return join(this.dataDir, "secrets");
  }
  /** Webhooks (their signing secrets: 0700) and their delivery history. */
  get webhooks(): string {
    return join(this.dataDir, "webhooks");
  }
  get stateDb(): string {
    return join(this.dataDir, "state.db");
  }
  /** Sandbox disks formatted ahead of starts (runtime/gvisor/overlay-disk.ts); emptied at start. */
  get formattedDisks(): string {
    return join(this.dataDir, "disks");
  }
  /** The gVisor platform this data dir's images are made on (runtime/gvisor/platform-choice.ts). */
  get runtimePlatform(): string {
    return join(this.dataDir, "runtime-platform");
  }
  /** runsc's --root. */
  get runtimeState(): string {
    return join(this.dataDir, "runsc");
  }
  /** envd, node and aenv-init, mounted read-only at /.aenv in every sandbox. */
  get envdRuntimeRoot(): string {
    return join(this.dataDir, "runtime");
  }
  get resolvConf(): string {
    return join(this.dataDir, "resolv.conf");
  }
  get repository(): string {
    return join(this.dataDir, "repository");
  }
  get cache(): string {
    return join(this.dataDir, "cache");
  }

  get sandboxes(): string {
    return join(this.dataDir, "sandboxes");
  }
  sandbox(id: string): string {
    return join(this.sandboxes, id);
  }
  /** One start of a sandbox (bundle, writable layer, logs): a resume is a new runtime ID. */
  sandboxRun(sandboxDir: string, runtimeId: string): string {
    return join(sandboxDir, runtimeId);
  }
  /** A paused sandbox's checkpoint. */
  pauseImage(sandboxDir: string): string {
    return join(sandboxDir, "image");
  }
  /** A sandbox's writable filesystem layer, kept by a filesystem-only pause. */
  fsLayer(sandboxDir: string): string {
    return join(sandboxDir, "fs-layer");
  }

  get snapshots(): string {
    return join(this.dataDir, "snapshots");
  }
  snapshot(id: string): string {
    return join(this.snapshots, id);
  }
  /** A snapshot's record until its repository commit is done (redone after a restart). */
  snapshotPending(id: string): string {
    return join(this.snapshots, `${id}.pending.json`);
  }

  /** Persistent volumes: `<id>/volume.json` (record, 0600) and `<id>/data` (the content). */
  get volumes(): string {
    return join(this.dataDir, "volumes");
  }
  volume(id: string): string {
    return join(this.volumes, id);
  }

  /**
   * Template trees packed for a repository commit, in the node's own folder (the templates
   * folder may be shared with other servers); removed at start, so a crash mid-commit
   * leaves nothing behind for long.
   */
  get commitStaging(): string {
    return join(this.dataDir, "commit-staging");
  }

  /**
   * Pause images handed to peers before their commit ended (cluster.p2p): hard links, so a
   * resume or removal of the sandbox here never pulls them from under a peer still reading.
   * Removed at start.
   */
  get peerPauses(): string {
    return join(this.dataDir, "peer-pauses");
  }
  peerPause(name: string): string {
    return join(this.peerPauses, name);
  }

  /** Transient captures of fork parents; removed at start. */
  get forks(): string {
    return join(this.dataDir, "forks");
  }
  fork(name: string): string {
    return join(this.forks, name);
  }

  // ---- templates dir: shareable between servers on the host
  /** Pre-booted template checkpoints, per template revision and runtime key. */
  get warmImages(): string {
    return join(this.templatesDir, ".warm");
  }
  warmImage(name: string): string {
    return join(this.warmImages, name);
  }
  /** Build context uploads (content-addressed). */
  get contextFiles(): string {
    return join(this.templatesDir, ".files");
  }
  /**
   * Whether `p` (a rootfs named by a repository manifest, written by another node) is one of
   * this node's template trees: `<id>/<rootfsDir>` under this templates dir, or a path that
   * resolves to exactly that tree (another server on the host with its own catalog). Anything
   * else would mount a host folder into a sandbox.
   */
  isTemplateTree(p: string): boolean {
    const key = templateTreeKey(p);
    if (!key) return false;
    const own = real(join(this.templatesDir, key.id, key.tree));
    return own !== undefined && own === real(resolve(p));
  }

  /**
   * This node's path for the template tree another node's rootfs path names (nodes lay out
   * their disks differently): the same template ID and revision under this templates dir.
   * It may not exist yet (see TemplateTrees).
   */
  localTemplateTree(p: string): string | undefined {
    const key = templateTreeKey(p);
    return key && join(this.templatesDir, key.id, key.tree);
  }

  /** Whether `p` (a runtime folder a manifest names) lies in this node's envd runtime folder. */
  isRuntimeDir(p: string): boolean {
    const root = real(this.envdRuntimeRoot);
    return root !== undefined && (real(p) ?? "").startsWith(root + sep);
  }

  /** OCI image blobs (content-addressed). */
  get imageBlobs(): string {
    return join(this.templatesDir, ".images");
  }
}
