import type { ImageStore, Progress } from "../storage/images/index.js";
import type { ImageProvider } from "./build-steps.js";

const MB = 1024 * 1024;
const short = (digest: string) => digest.replace(/^sha256:/, "").slice(0, 12);

/**
 * Layer progress as build log lines, one shape a CLI can draw bars from:
 *   `pull layer <digest12> <state> <bytes>/<size>`
 * A line on every state change, and at most one a second per layer while bytes move.
 */
function progressLines(onLog: (m: string) => void) {
  const last = new Map<string, { state: string; at: number }>();
  return (p: Progress, changed: Progress["layers"][number]) => {
    const prev = last.get(changed.digest);
    const now = Date.now();
    if (prev && prev.state === changed.state && now - prev.at < 1000) return;
    last.set(changed.digest, { state: changed.state, at: now });
    onLog(`${p.phase} layer ${short(changed.digest)} ${changed.state} ${changed.bytes}/${changed.size}`);
  };
}

/** Image templates from the OCI image store: pull (layers cached), then unpack. */
export function imageProvider(store: ImageStore): ImageProvider {
  return {
    async pullInto(ref, dest, onLog, credentials) {
      const t0 = Date.now();
      const img = await store.pull(ref, progressLines(onLog), undefined, credentials);
      const { blobsFetched, bytesFetched, layersCached } = img.transfer;
      onLog(
        `Pulled ${img.ref}@${img.digest}: ${img.layers.length} layers, ${layersCached} cached, ` +
          `${blobsFetched} blobs (${(bytesFetched / MB).toFixed(1)} MB) fetched in ${Date.now() - t0} ms`,
      );
      const t1 = Date.now();
      const stats = await store.unpack(img, dest, progressLines(onLog));
      onLog(`Unpacked in ${Date.now() - t1} ms (${JSON.stringify({ ...stats, dir: undefined })})`);
      return {
        ref: img.ref,
        digest: img.digest,
        env: img.config.env,
        ...(img.config.workdir ? { workdir: img.config.workdir } : {}),
        ...(img.config.user ? { user: img.config.user } : {}),
      };
    },
  };
}
