/**
 * An image made lazily startable: every layer of `ref` rewritten as eStargz (estargz-writer.ts)
 * into an OCI layout, with the config's diff_ids and each layer's TOC annotation. Pushed with
 * `skopeo copy --preserve-digests oci:DIR:TAG docker://…`, it starts on a node before its
 * layers are fetched (templates/seekable-tree.ts); any other runtime pulls it as plain gzip.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { decompressFile } from "./decompress.js";
import { TOC_DIGEST_ANNOTATION } from "./estargz.js";
import { writeEStargz } from "./estargz-writer.js";
import type { ImageStore } from "./image-store.js";
import { MT } from "./manifest.js";
import { readTar } from "./tar.js";

export interface Converted {
  /** Digest of the new manifest (what `oci:DIR:TAG` names). */
  digest: string;
  layers: Array<{ from: string; digest: string; size: number; tocDigest: string }>;
}

const sha = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

export async function convertToEStargz(store: ImageStore, ref: string, dir: string, tag: string): Promise<Converted> {
  const img = await store.pull(ref);
  const blobs = join(dir, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  const put = (b: Buffer) => {
    const d = sha(b);
    writeFileSync(join(blobs, d.slice(7)), b);
    return { digest: d, size: b.length };
  };
  const layers: Converted["layers"] = [];
  const diffIds: string[] = [];
  for (const l of img.layers) {
    const tmp = join(blobs, `.tmp-${randomBytes(6).toString("hex")}`);
    const w = await writeEStargz(readTar(decompressFile(store.blobs.path(l.digest))), tmp);
    renameSync(tmp, join(blobs, w.digest.slice(7)));
    layers.push({ from: l.digest, digest: w.digest, size: w.size, tocDigest: w.tocDigest });
    diffIds.push(w.diffId);
  }
  const rawConfig = JSON.parse((await store.blobs.read(img.configDigest)).toString("utf8")) as Record<string, unknown>;
  const config = put(
    Buffer.from(
      JSON.stringify({
        ...rawConfig,
        rootfs: { type: "layers", diff_ids: diffIds },
      }),
    ),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MT.ociManifest,
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: layers.map((l) => ({
        mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
        digest: l.digest,
        size: l.size,
        annotations: { [TOC_DIGEST_ANNOTATION]: l.tocDigest },
      })),
    }),
  );
  const m = put(manifest);
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  writeFileSync(
    join(dir, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MT.ociIndex,
      manifests: [{ mediaType: MT.ociManifest, ...m, annotations: { "org.opencontainers.image.ref.name": tag } }],
    }),
  );
  return { digest: m.digest, layers };
}
