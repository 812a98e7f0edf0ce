/**
 * eStargz (containerd/stargz-snapshotter's docs/estargz.md): a gzip layer in which every regular
 * file's bytes are gzip members of their own, with a table of contents (TOC) near the end and a
 * footer that says where the TOC starts. A node reads the footer and the TOC with two range
 * requests and then any file by its offsets, so a start needs only the files it opens.
 *
 * Trust: the manifest is the registry's word (as for any pull); the layer descriptor's
 * `containerd.io/snapshot/stargz/toc.digest` annotation pins the TOC, and the TOC pins every
 * chunk (`chunkDigest`) and every file (`digest`). Nothing read by range is used unverified.
 */
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { z } from "zod";
import { ImagePullError } from "./errors.js";
import { readTar } from "./tar.js";

export const TOC_DIGEST_ANNOTATION = "containerd.io/snapshot/stargz/toc.digest";
export const FOOTER_SIZE = 51;
const TOC_NAME = "stargz.index.json";
/** A TOC of a few million entries is a few hundred MB; past this a layer is pulled whole instead. */
export const MAX_TOC_BYTES = 256 * 1024 * 1024;

const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);
const Int = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const TocEntry = z.object({
  name: z.string().max(4096),
  type: z.enum(["dir", "reg", "symlink", "hardlink", "char", "block", "fifo", "chunk"]),
  size: Int.optional(),
  modtime: z.string().max(64).optional(),
  linkName: z.string().max(4096).optional(),
  mode: Int.optional(),
  uid: Int.optional(),
  gid: Int.optional(),
  digest: Digest.optional(),
  offset: Int.optional(),
  chunkOffset: Int.optional(),
  chunkSize: Int.optional(),
  chunkDigest: Digest.optional(),
  innerOffset: Int.optional(),
});
export type TocEntry = z.infer<typeof TocEntry>;

const Toc = z.object({ version: z.literal(1), entries: z.array(TocEntry).max(8_000_000) });
export type Toc = z.infer<typeof Toc>;

const bad = (msg: string) => new ImagePullError("bad-layer", `eStargz: ${msg}`);

/** Where the TOC starts, from a layer's last FOOTER_SIZE bytes; undefined when it is no eStargz footer. */
export function tocOffset(footer: Buffer): number | undefined {
  if (footer.length !== FOOTER_SIZE) return undefined;
  // gzip magic, deflate, FEXTRA; XLEN 26; subfield 'S' 'G' of length 22: 16 hex digits + "STARGZ".
  if (footer[0] !== 0x1f || footer[1] !== 0x8b || footer[2] !== 8 || (footer[3]! & 4) === 0) return undefined;
  if (footer.readUInt16LE(10) !== 26 || footer[12] !== 0x53 || footer[13] !== 0x47) return undefined;
  if (footer.readUInt16LE(14) !== 22) return undefined;
  const sub = footer.subarray(16, 38).toString("latin1");
  if (!/^[0-9a-f]{16}STARGZ$/.test(sub)) return undefined;
  const off = Number.parseInt(sub.slice(0, 16), 16);
  return Number.isSafeInteger(off) ? off : undefined;
}

/**
 * The TOC from its gzip member (the bytes from the footer's offset up to the footer), checked
 * against the digest the manifest's annotation gives and parsed strictly.
 */
export async function parseToc(gz: Buffer, wantDigest: string): Promise<Toc> {
  let tar: Buffer;
  try {
    tar = gunzipSync(gz, { maxOutputLength: MAX_TOC_BYTES + 64 * 1024 });
  } catch (e) {
    throw bad(`TOC does not decompress: ${(e as Error).message}`);
  }
  let json: Buffer | undefined;
  for await (const e of readTar(once(tar))) {
    if (e.header.name !== TOC_NAME || e.header.type !== "file") throw bad(`TOC member holds ${e.header.name}`);
    const parts: Buffer[] = [];
    for await (const c of e.body) parts.push(c);
    json = Buffer.concat(parts);
  }
  if (!json) throw bad("no TOC in its member");
  const got = `sha256:${createHash("sha256").update(json).digest("hex")}`;
  if (got !== wantDigest) throw bad(`TOC digest ${got} is not the manifest's ${wantDigest}`);
  try {
    return Toc.parse(JSON.parse(json.toString("utf8")));
  } catch (e) {
    throw bad(`TOC: ${(e as Error).message.slice(0, 300)}`);
  }
}

async function* once(b: Buffer): AsyncGenerator<Buffer> {
  yield b;
}

/** Seconds since the epoch of a TOC entry's RFC 3339 modtime (0 when absent or unreadable). */
export function modtimeOf(e: TocEntry): number {
  if (!e.modtime) return 0;
  const ms = Date.parse(e.modtime);
  return Number.isFinite(ms) ? Math.floor(ms / 1000) : 0;
}
