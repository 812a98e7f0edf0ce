import { createCipheriv, createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { estargzLayer } from "../../packages/server/test/helpers/estargz.js";
import {
  type Compression,
  makeTar,
  OciLayout,
  push,
  type TarSpec,
} from "../../packages/server/test/helpers/registry.js";

const APPLETS = ["sh", "ls", "cat", "echo", "id", "sleep", "env", "stat", "du", "wc", "sha256sum", "head"];

/** Bytes that do not compress, the same for the same seed (so a base is the same layer each time). */
export function seededBytes(seed: string, n: number): Buffer {
  // AES-CTR over zeros: a keyed stream at memory speed.
  const key = createHash("sha256").update(seed).digest().subarray(0, 16);
  const c = createCipheriv("aes-128-ctr", key, Buffer.alloc(16));
  return Buffer.concat([c.update(Buffer.alloc(n)), c.final()]);
}

export interface FamilyOptions {
  /** Images in the family, tagged `i1` … `iN` in one repository. */
  count: number;
  /** Files of the shared base layer and their size. */
  baseFiles: number;
  baseFileBytes: number;
  /** Files each image adds in a layer of its own. */
  ownFiles: number;
  ownFileBytes: number;
  /** `estargz`: seekable gzip layers (busybox and /etc marked to prefetch), which start lazily. */
  compression?: Compression | "estargz";
  /** Seeds the files' bytes: families with different seeds share no layer. */
  seed?: string;
}

/**
 * A family of images sharing a base layer (busybox, to run commands, and `baseFiles` files
 * under /shared), each with a layer of its own under /own and /id.txt — the shape of a set of
 * task images built on one environment image. Written as an OCI layout at `dir`.
 */
export function imageFamily(dir: string, o: FamilyOptions): { tags: string[]; baseBytes: number; ownBytes: number } {
  const c = o.compression ?? "gzip";
  const base: TarSpec[] = [
    { name: "bin/", type: "dir" },
    { name: "etc/", type: "dir" },
    { name: "root/", type: "dir", mode: 0o700 },
    { name: "tmp/", type: "dir", mode: 0o1777 },
    { name: "shared/", type: "dir" },
    { name: "bin/busybox", content: readFileSync("/bin/busybox"), mode: 0o755 },
    { name: "bin/bash", content: '#!/bin/busybox sh\nexec /bin/busybox sh "$@"\n', mode: 0o755 },
    ...APPLETS.map((a): TarSpec => ({ name: `bin/${a}`, type: "symlink", linkname: "busybox" })),
    { name: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
    { name: "etc/group", content: "root:x:0:\n" },
    ...Array.from(
      { length: o.baseFiles },
      (_, i): TarSpec => ({
        name: `shared/f${i}`,
        content: seededBytes(`${o.seed ?? ""}base-${i}`, o.baseFileBytes),
      }),
    ),
  ];
  const layout = new OciLayout(dir);
  const layer = (entries: TarSpec[], prefetch?: string[]) =>
    c === "estargz"
      ? { estargz: estargzLayer(entries, { chunkSize: 1024 * 1024, ...(prefetch ? { prefetch } : {}) }) }
      : { tar: makeTar(entries), compression: c };
  const baseLayer = layer(base, ["bin/busybox", "bin/bash", "etc/passwd", "etc/group"]);
  const tags: string[] = [];
  for (let n = 1; n <= o.count; n++) {
    const own: TarSpec[] = [
      { name: "own/", type: "dir" },
      { name: "id.txt", content: `image ${n}\n` },
      ...Array.from(
        { length: o.ownFiles },
        (_, i): TarSpec => ({
          name: `own/f${i}`,
          content: seededBytes(`${o.seed ?? ""}own-${n}-${i}`, o.ownFileBytes),
        }),
      ),
    ];
    const img = layout.image({
      layers: [baseLayer, layer(own)],
      config: { Env: ["PATH=/bin"], WorkingDir: "/" },
    });
    layout.tag(img, `i${n}`);
    tags.push(`i${n}`);
  }
  return { tags, baseBytes: o.baseFiles * o.baseFileBytes, ownBytes: o.ownFiles * o.ownFileBytes };
}

/** Pushes every image of a family to `host/repo:iN`. */
export async function pushFamily(dir: string, tags: string[], host: string, repo: string): Promise<void> {
  for (const t of tags) await push(dir, t, host, repo);
}
