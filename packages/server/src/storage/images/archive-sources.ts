/**
 * Where image bytes come from. A registry, or local files: an OCI layout directory (`oci:`), a
 * tar of one (`oci-archive:`) or a `docker save` tarball (`docker-archive:`). Archives are
 * indexed once (entry → offset) and blobs are streamed straight out of them, never extracted.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { ImagePullError } from "./errors.js";
import { MT } from "./manifest.js";
import { isDigest } from "./reference.js";
import type { RegistryClient } from "./registry-client.js";
import { readTar } from "./tar.js";

export interface ManifestBytes {
  bytes: Buffer;
  mediaType: string;
}

export interface ImageSource {
  /** Normalised name, for results and messages. */
  readonly name: string;
  /** True when blobs travel over the network (progress says "downloading"). */
  readonly remote: boolean;
  /** Digest the reference pins, known before fetching anything (lets a stored manifest be reused). */
  readonly pinnedDigest?: string;
  /** The manifest or index the reference names; `pinned` is its expected digest when known. */
  root(): Promise<ManifestBytes & { pinned?: string }>;
  manifest(digest: string): Promise<ManifestBytes>;
  blob(digest: string): Promise<Readable>;
  /** Bytes `start` to `end` (exclusive) of a blob, when the source serves ranges (registries do). */
  range?(digest: string, start: number, end: number): Promise<Buffer | undefined>;
}

export class RegistrySource implements ImageSource {
  readonly remote = true;
  readonly pinnedDigest?: string;
  constructor(
    readonly name: string,
    private readonly client: RegistryClient,
  ) {
    if (client.ref.digest) this.pinnedDigest = client.ref.digest;
  }

  async root() {
    const { tag, digest } = this.client.ref;
    const m = await this.client.getManifest(digest ?? tag!);
    return digest ? { ...m, pinned: digest } : m;
  }
  manifest(digest: string) {
    return this.client.getManifest(digest);
  }
  async blob(digest: string) {
    return (await this.client.getBlob(digest)).body;
  }
  range(digest: string, start: number, end: number) {
    return this.client.getBlobRange(digest, start, end);
  }
}

/** Read access to the files of a layout, whether a directory or a tar. */
interface Files {
  read(rel: string): Promise<Buffer>;
  open(rel: string): Promise<Readable>;
}

const archiveError = (where: string, msg: string) => new ImagePullError("archive", `${where}: ${msg}`);

class DirFiles implements Files {
  constructor(private readonly dir: string) {}
  async read(rel: string) {
    try {
      return await readFile(join(this.dir, rel));
    } catch {
      throw archiveError(this.dir, `missing ${rel}`);
    }
  }
  async open(rel: string) {
    const p = join(this.dir, rel);
    await stat(p).catch(() => {
      throw archiveError(this.dir, `missing ${rel}`);
    });
    return createReadStream(p);
  }
}

const tarName = (n: string) => n.replace(/^(\.?\/)+/, "");

class TarFiles implements Files {
  private index?: Map<string, { offset: number; size: number }>;
  constructor(private readonly path: string) {}

  private async entries() {
    if (this.index) return this.index;
    const index = new Map<string, { offset: number; size: number }>();
    try {
      for await (const e of readTar(createReadStream(this.path))) {
        if (e.header.type === "file") index.set(tarName(e.header.name), { offset: e.offset, size: e.header.size });
      }
    } catch (e) {
      throw archiveError(this.path, `not a readable tar archive (${(e as Error).message})`);
    }
    this.index = index;
    return index;
  }

  async region(rel: string) {
    const r = (await this.entries()).get(tarName(rel));
    if (!r) throw archiveError(this.path, `missing ${rel}`);
    return r;
  }
  async read(rel: string) {
    const chunks: Buffer[] = [];
    for await (const c of await this.open(rel)) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  }
  async open(rel: string) {
    const { offset, size } = await this.region(rel);
    // createReadStream's `end` is inclusive, so an empty file cannot be expressed as a range.
    return size === 0 ? Readable.from([]) : createReadStream(this.path, { start: offset, end: offset + size - 1 });
  }
}

const blobPath = (digest: string) => {
  if (!isDigest(digest)) throw new ImagePullError("unsupported", `bad digest ${digest}`);
  return `blobs/${digest.replace(":", "/")}`;
};

/** OCI image layout (directory or tar): index.json names one or more images by ref name. */
export class OciLayoutSource implements ImageSource {
  readonly remote = false;
  private readonly files: Files;
  constructor(
    readonly name: string,
    location: string,
    archive: boolean,
    private readonly tag?: string,
  ) {
    this.files = archive ? new TarFiles(location) : new DirFiles(location);
  }

  async root() {
    let index: { manifests?: { mediaType?: string; digest?: string; annotations?: Record<string, string> }[] };
    try {
      index = JSON.parse((await this.files.read("index.json")).toString("utf8"));
    } catch (e) {
      if (e instanceof ImagePullError) throw e;
      throw archiveError(this.name, "index.json is not valid JSON");
    }
    const all = index.manifests ?? [];
    const refName = (m: (typeof all)[number]) => m.annotations?.["org.opencontainers.image.ref.name"];
    const picked = this.tag ? all.filter((m) => refName(m) === this.tag) : all;
    if (picked.length !== 1 || !picked[0]!.digest) {
      const names = all.map((m) => refName(m) ?? m.digest).join(", ");
      throw archiveError(
        this.name,
        this.tag
          ? `no image tagged ${this.tag} (has: ${names || "none"})`
          : `${all.length} images, name one with :tag (has: ${names})`,
      );
    }
    const d = picked[0]!;
    return { ...(await this.manifest(d.digest!)), mediaType: d.mediaType ?? "", pinned: d.digest! };
  }
  async manifest(digest: string) {
    return { bytes: await this.files.read(blobPath(digest)), mediaType: "" };
  }
  blob(digest: string) {
    return this.files.open(blobPath(digest));
  }
}

/**
 * `docker save` output: manifest.json lists config and layer files. We hash them and present a
 * synthetic OCI manifest, so the rest of the pipeline (verification, caching) is the same.
 */
export class DockerArchiveSource implements ImageSource {
  readonly remote = false;
  private readonly files: TarFiles;
  private readonly byDigest = new Map<string, string>();

  constructor(
    readonly name: string,
    path: string,
    private readonly tag?: string,
  ) {
    this.files = new TarFiles(path);
  }

  async root() {
    let list: { Config?: string; RepoTags?: string[] | null; Layers?: string[] }[];
    try {
      list = JSON.parse((await this.files.read("manifest.json")).toString("utf8"));
    } catch (e) {
      if (e instanceof ImagePullError) throw e;
      throw archiveError(this.name, "manifest.json is not valid JSON");
    }
    if (!Array.isArray(list) || list.length === 0) throw archiveError(this.name, "manifest.json lists no images");
    const tags = (m: (typeof list)[number]) => m.RepoTags ?? [];
    const matchTag = (t: string) =>
      this.tag !== undefined && (t === this.tag || t.endsWith(`/${this.tag}`) || `docker.io/library/${t}` === this.tag);
    const picked = this.tag ? list.filter((m) => tags(m).some(matchTag)) : list;
    if (picked.length !== 1) {
      const all = list.flatMap(tags).join(", ") || "untagged";
      throw archiveError(
        this.name,
        this.tag ? `no image tagged ${this.tag} (has: ${all})` : `${list.length} images, name one (has: ${all})`,
      );
    }
    const m = picked[0]!;
    if (!m.Config || !Array.isArray(m.Layers))
      throw archiveError(this.name, "manifest.json entry lacks Config or Layers");
    const config = await this.files.read(m.Config);
    const configDigest = `sha256:${createHash("sha256").update(config).digest("hex")}`;
    this.byDigest.set(configDigest, m.Config);
    const layers = [];
    for (const file of m.Layers) {
      const hash = createHash("sha256");
      let size = 0;
      let head: Buffer | undefined;
      for await (const c of await this.files.open(file)) {
        const b = c as Buffer;
        head ??= b.subarray(0, 4);
        hash.update(b);
        size += b.length;
      }
      const digest = `sha256:${hash.digest("hex")}`;
      this.byDigest.set(digest, file);
      const mediaType =
        head?.[0] === 0x1f && head[1] === 0x8b
          ? MT.ociLayerGzip
          : head && head.length === 4 && head.readUInt32LE(0) === 0xfd2fb528
            ? MT.ociLayerZstd
            : MT.ociLayer;
      layers.push({ mediaType, digest, size });
    }
    const manifest = {
      schemaVersion: 2,
      mediaType: MT.ociManifest,
      config: { mediaType: MT.ociConfig, digest: configDigest, size: config.length },
      layers,
    };
    return { bytes: Buffer.from(JSON.stringify(manifest)), mediaType: MT.ociManifest };
  }
  async manifest(digest: string): Promise<ManifestBytes> {
    throw archiveError(this.name, `no manifest ${digest} in a docker archive`);
  }
  async blob(digest: string) {
    const file = this.byDigest.get(digest);
    if (!file) throw archiveError(this.name, `no blob ${digest}`);
    return this.files.open(file);
  }
}
