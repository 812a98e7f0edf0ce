import type { Logger } from "pino";
import { type PauseMeta, pauseManifestId, pauseMetaOf } from "../storage/repository/manifest-kinds.js";
import type { ChunkHolder, Manifest, SnapshotRepository } from "../storage/repository/repository.js";
import { UntrustedManifestError } from "../storage/repository/trust.js";
import type { PausePeers } from "./pause-offers.js";

/** A pause another node holds, its manifest verified. */
export interface VerifiedPeerPause {
  node: string;
  manifest: Manifest;
  meta: PauseMeta;
  holder: ChunkHolder;
}

/**
 * What a peer's manifest must be, beyond its seal (the repository key: only a cluster node
 * made it): the pause of this sandbox that the cluster's state names (its tag), so a node
 * that answers for another pause, an older one or another sandbox is refused.
 */
export function checkPeerPause(sandboxId: string, tag: string, m: Manifest): PauseMeta {
  const why = (reason: string) => new UntrustedManifestError(m.id, reason);
  let refused: UntrustedManifestError | undefined;
  const meta = pauseMetaOf(m, (err) => (refused = err));
  if (!meta) throw refused ?? why("not a paused sandbox's manifest");
  if (m.id !== pauseManifestId(sandboxId) || meta.sandbox.id !== sandboxId) throw why("names another sandbox");
  const got = meta.sandbox.pause?.tag;
  if (got !== tag) throw why(`its pause ${String(got)} is not the one the cluster offers (${tag})`);
  return meta;
}

/**
 * A resuming node's side: when the repository has no manifest of a pause yet, the node that
 * offers it (Redis) is asked for one; it counts only sealed with the repository key and
 * naming the offered pause, and each chunk only by its digest.
 */
export class PeerPauseSource {
  constructor(
    private readonly d: {
      peers: PausePeers;
      repository: Pick<SnapshotRepository, "openOffered" | "materializeFrom">;
      log: Logger;
    },
  ) {}

  async find(sandboxId: string): Promise<VerifiedPeerPause | undefined> {
    const p = await this.d.peers.fetch(sandboxId).catch((err: Error) => {
      this.d.log.warn({ sandboxID: sandboxId, err: err.message }, "pause offered by a peer not fetched");
      return undefined;
    });
    if (!p) return undefined;
    try {
      const manifest = this.d.repository.openOffered(pauseManifestId(sandboxId), p.sealed);
      const meta = checkPeerPause(sandboxId, p.tag, manifest);
      return { node: p.node, manifest, meta, holder: p.holder };
    } catch (err) {
      this.d.log.error(
        { sandboxID: sandboxId, node: p.node, err: (err as Error).message },
        "pause manifest from a peer refused",
      );
      return undefined;
    }
  }

  /** The pause's image from its peer into `destDir`, every chunk verified; refused chunks fail it. */
  materialize(p: VerifiedPeerPause, destDir: string): Promise<void> {
    return this.d.repository.materializeFrom(p.manifest, destDir, [p.holder]);
  }
}
