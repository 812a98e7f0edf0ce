import { closeSync, existsSync, fsyncSync, openSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { NodePaths } from "../node-paths.js";
import type { PausedSandboxRecord, SandboxRecord } from "../state/store.js";
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

/** A pause to offer: the record it was read from, its tag and image, and the record now (undefined once the sandbox is not paused). */
interface OfferedPause {
  rec: PausedSandboxRecord;
  tag: string;
  image: string;
  paused: () => PausedSandboxRecord | undefined;
}

const localIdOf = (sandboxId: string, tag: string) => `offer-${sandboxId}.${tag}`;
/** Kept in the sandbox's folder: a restart must not forget that a peer may have this pause. */
const servedMark = (sandboxDir: string, tag: string) => join(sandboxDir, `peer-served.${tag}`);

/**
 * The pausing node's side of a resume elsewhere before the commit ended: its paused sandboxes
 * are offered in Redis, and a peer asking is sent a manifest built here (chunked and hashed as
 * a commit would, sealed with the repository key) whose chunks this node serves from hard
 * links of the image. Built beside the sandbox's operation queue (hashing a large image takes
 * seconds, and a resume here must not wait for it), then sent from inside it: a resume here
 * either comes first (the sandbox runs, the offer is dropped, nothing is sent) or knows the
 * pause was handed out (served: it then resumes only with the repository's claim, as any
 * node does). A pause's image never changes under its tag, so an offer built from it stays
 * true for as long as the sandbox is paused under that tag.
 */
export class PauseOffers {
  private readonly offers = new Map<string, Offer>();
  /** The tag each sandbox's offer was published with, to withdraw it. */
  private readonly published = new Map<string, string>();
  private readonly removals = new Set<NodeJS.Timeout>();
  /** Offers being built, by sandbox and tag: peers asking at once share one. */
  private readonly building = new Map<string, Promise<Offer | undefined>>();

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
    if (!l) return undefined;
    const paused = (): PausedSandboxRecord | undefined => {
      const rec = l.rec;
      if (registry.get(id) !== l || rec.state !== "paused" || rec.pause.imagePending) return undefined;
      return rec;
    };
    const rec = paused();
    const tag = rec?.pause.tag;
    const image = rec?.pause.imageDir;
    if (!rec || !tag || !image) return undefined;
    const o = await this.offerOf({ rec, tag, image, paused });
    if (!o) return undefined;
    return registry.enqueue(l, async () => {
      // Marked (durably) before it leaves: a resume queued behind this one, or after a restart, must claim it.
      const now = paused();
      if (now?.pause.tag !== tag || this.offers.get(id) !== o) return undefined;
      if (!o.served) {
        const fd = openSync(servedMark(now.dir, tag), "w", 0o600);
        fsyncSync(fd);
        closeSync(fd);
        await fsyncDir(now.dir);
      }
      o.served = true;
      this.d.log.info({ sandboxID: id, tag }, "pause manifest sent to a peer (its commit has not finished)");
      return o.sealed;
    });
  }

  /** The offer of pause `p`, built once (or found built); undefined once the sandbox is not paused so. */
  private offerOf(p: OfferedPause): Promise<Offer | undefined> {
    const id = p.rec.id;
    const tag = p.tag;
    const have = this.offers.get(id);
    if (have?.tag === tag) return Promise.resolve(have);
    const key = `${id}.${tag}`;
    let built = this.building.get(key);
    if (!built) {
      built = this.build(p).finally(() => this.building.delete(key));
      this.building.set(key, built);
    }
    return built;
  }

  private async build({ rec, tag, image, paused }: OfferedPause): Promise<Offer | undefined> {
    const id = rec.id;
    const dir = this.d.paths.peerPause(`${id}.${tag}`);
    const discard = () => {
      this.d.repository.forgetOffer(localIdOf(id, tag));
      rmSync(dir, { recursive: true, force: true });
    };
    rmSync(dir, { recursive: true, force: true });
    try {
      linkTree(image, dir);
      const sealed = await this.d.repository.offer(
        pauseManifestId(id),
        dir,
        pauseMetaFor(rec, this.d.checkpointKey),
        localIdOf(id, tag),
      );
      // Resumed, killed or paused again meanwhile: what was built may be part of an image
      // already going, and is no one's to send.
      if (paused()?.pause.tag !== tag) {
        discard();
        return undefined;
      }
      this.drop(id);
      const o: Offer = { tag, dir, sealed, served: false };
      this.offers.set(id, o);
      return o;
    } catch (err) {
      discard();
      if (paused()?.pause.tag !== tag) return undefined;
      throw err;
    }
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
