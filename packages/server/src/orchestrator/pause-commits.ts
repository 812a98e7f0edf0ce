import { rmSync } from "node:fs";
import { NotFoundError, RuntimeMismatchError, StartFailedError } from "@aenv/edge/errors";
import type { SandboxRecord } from "../state/store.js";
import {
  type PauseMeta,
  pauseClaimName,
  pauseManifestId,
  pauseMetaFor,
  pauseMetaOf,
} from "../storage/repository/manifest-kinds.js";
import { countPauseCommit } from "../telemetry/prometheus.js";
import type { NodeContext } from "./node-context.js";
import { PeerPauseSource } from "./pause-from-peer.js";
import { autoResumable, pauseDir, pausedError, type ResumeOptions, refuseResumer } from "./pause-kinds.js";
import { PauseOffers, type PausePeers } from "./pause-offers.js";
import { materializeImage } from "./snapshots.js";
import type { TemplateTrees } from "./template-trees.js";

/**
 * The repository side of pauses: a pause image stays node-local at first and is committed to
 * the shared repository once its sandbox has stayed paused a while, so any node can resume
 * it; a resume claims it there, a node takes over another's from its manifest, and a lost
 * local copy is rebuilt from it.
 */
/** A failed commit is tried again after 2 s, then twice as long each time, a minute at most. */
const RETRY_FIRST_S = 2;
const RETRY_MAX_S = 60;

export class PauseCommits {
  /** Pause images waiting to be committed, by sandbox ID. */
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** Commits of pause images still running, by sandbox ID. */
  private readonly commits = new Map<string, Promise<void>>();
  /** With cluster.p2p: this node's pauses offered to peers before their commit ends. */
  private offers?: PauseOffers;
  private fromPeers?: PeerPauseSource;
  private peers?: PausePeers;
  /** Sandboxes taken over from a peer's offer, by ID: the tag of that offer, withdrawn once resumed. */
  private readonly adoptedFromPeer = new Map<string, string>();

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: { trees: Pick<TemplateTrees, "local"> },
  ) {}

  /**
   * Commits a pause image to the repository in the background (the local image is already
   * durable, so pause does not wait). Short pause/resume cycles, the common case in rollouts,
   * never pay for it: it starts once the sandbox has stayed paused a while.
   */
  commitLater(rec: SandboxRecord, imageDir: string): void {
    this.offers?.offer(rec);
    this.schedule(rec, imageDir, this.ctx.cfg.repository.pauseCommitDelayS, 0);
  }

  /**
   * cluster.p2p: a pause can be resumed on another node before its commit ends, from a
   * manifest this node serves (pause-offers.ts); this node resumes pauses of its peers alike.
   */
  usePeers(peers: PausePeers): void {
    const { paths, registry, repository, checkpointKey, log } = this.ctx;
    this.peers = peers;
    this.offers = new PauseOffers({ paths, registry, repository, peers, checkpointKey, log });
    this.fromPeers = new PeerPauseSource({ peers, repository, log });
    // Pauses recovered at start whose commit is still to come: offered again.
    for (const id of this.timers.keys()) {
      const l = registry.get(id);
      if (l?.rec.state === "paused") this.offers.offer(l.rec);
    }
  }

  /** A paused sandbox's manifest for a peer (GET /cluster/pauses/:id); undefined when not offered. */
  servePeer(id: string): Promise<Buffer | undefined> {
    return this.offers?.serve(id) ?? Promise.resolve(undefined);
  }

  private schedule(rec: SandboxRecord, imageDir: string, delayS: number, attempt: number): void {
    const id = rec.id;
    const timer = setTimeout(() => {
      this.timers.delete(id);
      const l = this.ctx.registry.get(id);
      if (l?.rec.state === "paused" && l.rec.pause.imageDir === imageDir && !this.ctx.registry.isClosing) {
        this.commitNow(rec, imageDir, attempt);
      }
    }, delayS * 1000);
    timer.unref();
    this.timers.set(id, timer);
  }

  private commitNow(rec: SandboxRecord, imageDir: string, attempt: number): void {
    const id = rec.id;
    const tag = rec.pause?.tag;
    const t0 = Date.now();
    const meta = pauseMetaFor(rec, this.ctx.checkpointKey);
    const p = this.takenByPeer(id, tag, false)
      .then(async (taken) => {
        if (taken) return;
        const { manifest, stats } = await this.ctx.repository.commit(pauseManifestId(id), imageDir, meta);
        countPauseCommit(true);
        if (await this.takenByPeer(id, tag, true)) return;
        // Any node finds it in the repository now.
        this.offers?.release(id);
        // Its chunks stay in the node cache while it is paused: a resume never waits on a fetch.
        this.ctx.repository.pinManifest(manifest);
        this.ctx.log.info({ sandboxID: id, ...stats, ms: Date.now() - t0, attempt }, "pause image committed");
      })
      .catch((err) => {
        countPauseCommit(false);
        // The pause itself stands (its local image is durable and resumes here), but until it
        // is committed no other node can resume it, and losing this host loses it: loud, and
        // tried again for as long as the sandbox stays paused.
        const retryInS = Math.min(RETRY_FIRST_S * 2 ** attempt, RETRY_MAX_S);
        this.ctx.log.error(
          { err, sandboxID: id, attempt, retryInS },
          "pause image not committed to the repository: kept on this node only until a retry succeeds",
        );
        this.schedule(rec, imageDir, retryInS, attempt + 1);
      })
      .finally(() => {
        if (this.commits.get(id) === p) this.commits.delete(id);
      });
    this.commits.set(id, p);
  }

  /**
   * Whether a peer this pause was sent to (pause-offers.ts) claimed it, so resumed it: this
   * node's copy is stale and dropped, never committed; a manifest of it this node committed
   * meanwhile is removed while it still names that pause (a newer pause's replaces it).
   */
  private async takenByPeer(id: string, tag: string | undefined, committed: boolean): Promise<boolean> {
    const l = this.ctx.registry.get(id);
    if (!l || !this.offers?.served(id, tag)) return false;
    const holder = await this.ctx.repository.claimHolder(pauseClaimName({ id, pause: { tag } }));
    if (!holder || holder === this.ctx.cfg.cluster?.nodeId) return false;
    if (committed) {
      const m = await this.ctx.repository.get(pauseManifestId(id)).catch(() => undefined);
      if (m && pauseMetaOf(m)?.sandbox.pause?.tag === tag) await this.ctx.repository.delete(pauseManifestId(id));
    }
    this.ctx.log.warn({ sandboxID: id, holder }, "pause sent to a peer was resumed there: this node's copy dropped");
    // Not awaited: a resume in the queue may be waiting for this very commit (claim).
    void this.ctx.registry.enqueue(l, async () => {
      if (this.ctx.registry.get(id) === l && l.rec.state === "paused" && l.rec.pause.tag === tag) this.dropMoved(l.rec);
    });
    return true;
  }

  /**
   * In a cluster, once a pause image is (being) committed any node may resume it: the first to
   * claim it in the repository does; a node that finds another's claim (it restarted with an
   * old copy, or lost a race Redis should have prevented) drops its copy and says not found.
   */
  private async claim(rec: SandboxRecord): Promise<void> {
    const nodeId = this.ctx.cfg.cluster?.nodeId;
    if (!nodeId) return;
    // Never committed nor sent to a peer: no other node can have it. Called in the sandbox's
    // operation queue, as a peer is sent it (pause-offers.ts): the two never cross.
    if (this.timers.has(rec.id) && !this.offers?.served(rec.id, rec.pause?.tag)) return;
    await this.commits.get(rec.id);
    if (await this.ctx.repository.claim(pauseClaimName(rec), nodeId)) return;
    throw this.moved(rec);
  }

  /**
   * Takes the claim of a pause to resume it here, its image whole first (`complete`: it is
   * already): rebuilt before the claim, because the node the pause came from drops its copy
   * once another node holds the claim, so a claim must never stand for an image that a failed
   * or refused fetch left unbuilt. Another node's claim is looked for before the fetch, so a
   * pause resumed elsewhere is not fetched for nothing.
   */
  async claimWhole(rec: SandboxRecord, image: string, complete: boolean): Promise<void> {
    if (!complete) {
      if (await this.claimedElsewhere(rec)) throw this.moved(rec);
      await this.rebuild(rec.id, image);
    }
    await this.claim(rec);
  }

  private moved(rec: SandboxRecord): NotFoundError {
    this.ctx.log.warn({ sandboxID: rec.id }, "pause was resumed by another node; dropping this node's copy");
    this.dropMoved(rec);
    return new NotFoundError(`sandbox '${rec.id}' was resumed on another node`);
  }

  /**
   * The node holding the claim of this pause, when it is another node: it resumed this pause
   * (while this node was away or cut off), and this node's copy is stale.
   */
  async claimedElsewhere(rec: SandboxRecord): Promise<string | undefined> {
    const nodeId = this.ctx.cfg.cluster?.nodeId;
    if (!nodeId) return undefined;
    const holder = await this.ctx.repository.claimHolder(pauseClaimName(rec));
    return holder && holder !== nodeId ? holder : undefined;
  }

  /** Forgets a paused sandbox another node took over; its repository objects are that node's now. */
  dropMoved(rec: SandboxRecord): void {
    const timer = this.timers.get(rec.id);
    if (timer) clearTimeout(timer);
    this.timers.delete(rec.id);
    this.offers?.release(rec.id);
    this.adoptedFromPeer.delete(rec.id);
    this.ctx.repository.unpin(pauseManifestId(rec.id));
    this.ctx.states.forget(rec.id);
    this.ctx.registry.remove(rec.id);
    rmSync(rec.dir, { recursive: true, force: true });
  }

  /** Once a sandbox runs again (or is gone) its pause manifest is obsolete. */
  forget(id: string): void {
    this.offers?.release(id);
    const offered = this.adoptedFromPeer.get(id);
    this.adoptedFromPeer.delete(id);
    // Resumed (or killed) here: the peer's offer it came from is void.
    if (offered) this.peers?.withdraw(id, offered);
    const timer = this.timers.get(id);
    if (timer) {
      // Never committed: nothing to remove.
      clearTimeout(timer);
      this.timers.delete(id);
      return;
    }
    const pending = this.commits.get(id) ?? Promise.resolve();
    void pending
      .then(() => {
        this.ctx.repository.unpin(pauseManifestId(id));
        return this.ctx.repository.delete(pauseManifestId(id));
      })
      .catch((err) => this.ctx.log.warn({ err, sandboxID: id }, "pause manifest not removed"));
  }

  /**
   * Rebuilds a paused sandbox's image from its pause manifest (the local copy is gone): the
   * repository's, else (its commit not finished) the one the node that paused it offers.
   */
  async rebuild(id: string, image: string): Promise<void> {
    await this.commits.get(id);
    try {
      const tag = this.ctx.registry.get(id)?.rec.pause?.tag;
      const source = this.fromPeers;
      // Only a pause taken over from a peer's offer asks whether its commit has landed since.
      const offered = source && tag && this.adoptedFromPeer.get(id) === tag;
      if (offered && !(await this.ctx.repository.get(pauseManifestId(id)).catch(() => undefined))) {
        const peer = await source.find(id);
        if (peer?.meta.sandbox.pause?.tag !== tag) throw new Error("not in the repository, and no peer offers it");
        const t0 = Date.now();
        await materializeImage(this.ctx.repository, pauseManifestId(id), image, (tmp) => source.materialize(peer, tmp));
        this.ctx.log.info({ sandboxID: id, node: peer.node, ms: Date.now() - t0 }, "pause image rebuilt from a peer");
        return;
      }
      await materializeImage(this.ctx.repository, pauseManifestId(id), image);
      this.ctx.log.info({ sandboxID: id }, "pause image rebuilt from the repository");
    } catch (err) {
      throw new StartFailedError(`sandbox '${id}' has no usable pause image: ${(err as Error).message}`);
    }
  }

  close(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.offers?.close();
  }

  /** Commits every paused sandbox's image now and waits (a node about to leave the cluster). */
  async flush(): Promise<void> {
    for (const [id, timer] of this.timers) {
      clearTimeout(timer);
      this.timers.delete(id);
      const l = this.ctx.registry.get(id);
      if (l?.rec.state === "paused" && l.rec.pause.imageDir) this.commitNow(l.rec, l.rec.pause.imageDir, 0);
    }
    await Promise.all([...this.commits.values()]);
  }

  /** Whether a paused sandbox's image is in the repository (any node can resume it). */
  async committed(id: string): Promise<boolean> {
    await this.commits.get(id);
    return !!(await this.ctx.repository.get(pauseManifestId(id)).catch(() => undefined));
  }

  /**
   * A sandbox paused on another node (gone, or drained) is taken over from its pause manifest:
   * its record comes with it, its image is rebuilt from the repository when it resumes.
   */
  async adopt(id: string, runtimeDir: string, opts: ResumeOptions = {}): Promise<boolean> {
    const m = await this.ctx.repository.get(pauseManifestId(id)).catch(() => undefined);
    let meta: PauseMeta | undefined =
      m && pauseMetaOf(m, (err) => this.ctx.log.error({ sandboxID: id }, `${err.message}; treated as unusable`));
    // Its commit has not finished: the node that paused it may offer it (cluster.p2p).
    const peer = !m && this.fromPeers ? await this.fromPeers.find(id) : undefined;
    meta ??= peer?.meta;
    if (!meta || meta.sandbox.id !== id || this.ctx.registry.has(id)) return false;
    // Before it is taken over: traffic that may not reach it must not move it here either.
    refuseResumer(meta.sandbox, opts);
    if (opts.auto && !autoResumable(meta.sandbox)) throw pausedError(meta.sandbox);
    // A filesystem layer needs only the template tree; a checkpoint needs the same runtime.
    if (meta.sandbox.pause?.kind !== "filesystem" && meta.imageKey !== this.ctx.checkpointKey) {
      throw new RuntimeMismatchError(
        `sandbox '${id}' was paused on another runtime (${meta.imageKey}, here ${this.ctx.checkpointKey})`,
        meta.imageKey,
      );
    }
    // Its node's path names a template tree: this node's copy of the same tree (fetched from
    // the repository when missing) is what is mounted, never a path from the repository.
    const rootfs = await this.uses.trees.local(meta.sandbox.rootfs, `sandbox '${id}'`).catch((err: Error) => {
      this.ctx.log.error(
        { sandboxID: id, rootfs: meta.sandbox.rootfs, err: err.message },
        "paused sandbox not resumable here",
      );
      throw err;
    });
    if (this.ctx.registry.has(id)) return false;
    const dir = this.ctx.paths.sandbox(id);
    const pause = meta.sandbox.pause ?? {};
    const rec: SandboxRecord = {
      ...meta.sandbox,
      rootfs,
      state: "paused",
      pause: { ...pause, imageDir: pauseDir(this.ctx.paths, dir, pause.kind) },
      dir,
      slotIndex: null,
      runtimeDir,
    };
    this.ctx.states.save(rec);
    this.ctx.registry.add({ rec, op: Promise.resolve() });
    if (peer && rec.pause.tag) this.adoptedFromPeer.set(id, rec.pause.tag);
    const from = peer ? `peer ${peer.node}` : "the repository";
    this.ctx.log.info({ sandboxID: id }, `paused sandbox taken over from ${from}`);
    return true;
  }
}
