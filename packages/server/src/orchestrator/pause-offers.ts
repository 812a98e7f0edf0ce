import { closeSync, existsSync, fsyncSync, openSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { NodePaths } from "../node-paths.js";
import type { SandboxRecord } from "../state/store.js";
import { pauseManifestId, pauseMetaFor } from "../storage/repository/manifest-kinds.js";
import type { ChunkHolder, SnapshotRepository } from "../storage/repository/repository.js";
import { fsyncDir } from "../util/fsync.js";
import { linkTree } from "../util/link-tree.js";
import type { SandboxRegistry } from "./registry.js";

/** What another node sends of a paused sandbox it holds; nothing of it is verified yet. */
export interface PeerPause {
  node: string;
  /** The pause tag the cluster's state names for it. */
  tag: string;
  /** Its manifest, sealed as the repository's manifests are. */
  sealed: Buffer;
  /** That node, as the holder of the manifest's chunks. */
  holder: ChunkHolder;
}

/**
 * Where nodes tell each other which node holds a pause image not committed yet, and fetch its
 * manifest from that node (cluster.p2p: Redis and the node API, cluster/peer-pauses.ts).
 */
export interface PausePeers {
  offer(sandboxId: string, tag: string): void;
  /** Removes the offer of that pause, unless a newer pause of the sandbox replaced it. */
  withdraw(sandboxId: string, tag: string): void;
  fetch(sandboxId: string): Promise<PeerPause | undefined>;
}

/** A peer that took a manifest is given this long to read its chunks once the pause is no longer this node's. */
const KEEP_SERVED_MS = 10 * 60_000;

interface Offer {
  tag: string;
  dir: string;
  sealed: Buffer;
  /** A peer was sent the manifest: it may have claimed and resumed this pause. */
  served: boolean;
}

const localIdOf = (sandboxId: string, tag: string) => `offer-${sandboxId}.${tag}`;
/** Kept in the sandbox's folder: a restart must not forget that a peer may have this pause. */
const servedMark = (sandboxDir: string, tag: string) => join(sandboxDir, `peer-served.${tag}`);

/**
 * The pausing node's side of a resume elsewhere before the commit ended: its paused sandboxes
 * are offered in Redis, and a peer asking is sent a manifest built here (chunked and hashed as
 * a commit would, sealed with the repository key) whose chunks this node serves from hard
 * links of the image. Built and sent in the sandbox's operation queue, so a resume here
 * either comes first (the sandbox runs, nothing is sent) or knows the pause was handed out
 * (served: it then resumes only with the repository's claim, as any node does).
 */
export class PauseOffers {
  private readonly offers = new Map<string, Offer>();
  /** The tag each sandbox's offer was published with, to withdraw it. */
  private readonly published = new Map<string, string>();
  private readonly removals = new Set<NodeJS.Timeout>();

  constructor(
    private readonly d: {
      paths: NodePaths;
      registry: SandboxRegistry;
      repository: Pick<SnapshotRepository, "offer" | "forgetOffer">;
      peers: PausePeers;
      checkpointKey: string;
      log: Logger;
    },
  ) {}

  /** A pause image written here whose commit is still to come. */
  offer(rec: SandboxRecord): void {
    const tag = rec.pause?.tag;
    if (!tag) return;
    this.published.set(rec.id, tag);
    this.d.peers.offer(rec.id, tag);
  }

  /** Whether a peer was sent this pause's manifest (before a restart too). */
  served(id: string, tag: string | undefined): boolean {
    const o = this.offers.get(id);
    if (o?.served && o.tag === tag) return true;
    const dir = this.d.registry.get(id)?.rec.dir;
    return !!tag && !!dir && existsSync(servedMark(dir, tag));
  }

  /** The sealed manifest of a sandbox paused here, for a peer; undefined when it is not. */
  async serve(id: string): Promise<Buffer | undefined> {
    const { registry } = this.d;
    const l = registry.get(id);
    if (l?.rec.state !== "paused") return undefined;
    return registry.enqueue(l, async () => {
      const paused = () => {
        const rec = l.rec;
        const ok = registry.get(id) === l && rec.state === "paused" && !rec.pause.imagePending;
        return ok ? rec : undefined;
      };
      const rec = paused();
      const tag = rec?.pause.tag;
      const image = rec?.pause.imageDir;
      if (!rec || !tag || !image) return undefined;
      let o = this.offers.get(id);
      if (o?.tag !== tag) {
        this.drop(id);
        const dir = this.d.paths.peerPause(`${id}.${tag}`);
        rmSync(dir, { recursive: true, force: true });
        linkTree(image, dir);
        const meta = pauseMetaFor(rec, this.d.checkpointKey);
        const sealed = await this.d.repository
          .offer(pauseManifestId(id), dir, meta, localIdOf(id, tag))
          .catch((err) => {
            rmSync(dir, { recursive: true, force: true });
            throw err;
          });
        o = { tag, dir, sealed, served: false };
        this.offers.set(id, o);
      }
      // Marked (durably) before it leaves: a resume queued behind this one, or after a restart, must claim it.
      if (paused()?.pause.tag !== tag) return undefined;
      if (!o.served) {
        const fd = openSync(servedMark(rec.dir, tag), "w", 0o600);
        fsyncSync(fd);
        closeSync(fd);
        await fsyncDir(rec.dir);
      }
      o.served = true;
      this.d.log.info({ sandboxID: id, tag }, "pause manifest sent to a peer (its commit has not finished)");
      return o.sealed;
    });
  }

  /**
   * The pause is no longer this node's to offer (resumed, killed, taken over, committed): its
   * offer is withdrawn, and what a peer may still be reading is removed once it had time to.
   */
  release(id: string): void {
    const tag = this.published.get(id);
    this.published.delete(id);
    if (tag) this.d.peers.withdraw(id, tag);
    this.drop(id);
  }

  private drop(id: string): void {
    const o = this.offers.get(id);
    if (!o) return;
    this.offers.delete(id);
    const remove = () => {
      this.d.repository.forgetOffer(localIdOf(id, o.tag));
      rmSync(o.dir, { recursive: true, force: true });
    };
    if (!o.served) {
      remove();
      return;
    }
    const t = setTimeout(() => {
      this.removals.delete(t);
      remove();
    }, KEEP_SERVED_MS);
    t.unref();
    this.removals.add(t);
  }

  /** The node stops: nothing is served any more. */
  close(): void {
    for (const t of this.removals) clearTimeout(t);
    for (const [id, tag] of this.published) this.d.peers.withdraw(id, tag);
    this.published.clear();
    this.offers.clear();
    rmSync(this.d.paths.peerPauses, { recursive: true, force: true });
  }
}
