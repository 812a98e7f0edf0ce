/**
 * ImageStore: image reference → verified blobs in a shared content-addressed store (pull), and
 * blobs → a root filesystem directory (unpack). No Docker daemon involved.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, open, rm, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { forEachLimit } from "../../util/concurrency.js";
import { publishTree } from "../../util/durable-write.js";
import { DockerArchiveSource, type ImageSource, OciLayoutSource, RegistrySource } from "./archive-sources.js";
import { authFilePath, type Credentials, loadCredentials } from "./auth.js";
import { BlobStore, digestOf } from "./blob-store.js";
import { onDisk } from "./content-store.js";
import { decompressFile } from "./decompress.js";
import { ImagePullError } from "./errors.js";
import { FOOTER_SIZE, parseToc, TOC_DIGEST_ANNOTATION, type Toc, tocOffset } from "./estargz.js";
import {
  formatPlatform,
  hostPlatform,
  type ImageConfig,
  type ImageManifest,
  type Platform,
  parseConfig,
  parseManifest,
  selectPlatform,
} from "./manifest.js";
import { type ProgressCallback, ProgressTracker } from "./progress.js";
import { formatSource, parseSource } from "./reference.js";
import { DEFAULT_MAX_MANIFEST_BYTES, RegistryClient } from "./registry-client.js";
import { RegistryNet } from "./registry-net.js";
import { readTar, type TarEntry } from "./tar.js";
import { type DiskBudget, RootfsWriter, type UnpackContent, type UnpackStats } from "./unpack.js";

export interface ImageStoreOptions {
  /** Store root; blobs live in `<dir>/blobs/sha256/<hex>`. */
  dir: string;
  /** Docker-style auth file; default REGISTRY_AUTH_FILE, DOCKER_CONFIG/config.json, ~/.docker/config.json. */
  authFile?: string;
  /** Registries (`host` or `host:port`) spoken to over plain HTTP; loopback ones always are. */
  insecureRegistries?: string[];
  /**
   * Registries, redirects and token realms may be at loopback, private or link-local addresses
   * (never metadata ones). Off by default: image references come from API callers.
   */
  allowPrivateRegistries?: boolean;
  /** Where pulls may connect, for tests that swap name resolution; overrides allowPrivateRegistries. */
  net?: RegistryNet;
  /** Platform to pick from multi-arch indexes; default linux + the host architecture. */
  platform?: Platform;
  log?: (msg: string) => void;
  /** Parallel blob downloads (default 3). */
  concurrency?: number;
  /** A registry silent this long is given up on (default 60 s; see RegistryClientOptions). */
  fetchTimeoutMs?: number;
  /** Largest manifest, index or image config accepted (default 4 MiB). */
  maxManifestBytes?: number;
  /** Largest image accepted: config plus compressed layers, as the manifest declares them (default 32 GiB). */
  maxImageBytes?: number;
  /** Most bytes of tar (all layers, decompressed) an unpack reads (default 64 GiB). */
  maxUnpackedBytes?: number;
  /** Most tar entries (all layers) an unpack applies (default 4,000,000). */
  maxUnpackedEntries?: number;
}

/**
 * Other holders of blobs (nodes of a cluster), asked before the registry. What a peer sends is
 * verified like what a registry sends (digest and size): a peer is a faster path, never a
 * trusted one, and a blob a peer gets wrong is fetched from the next holder or the registry.
 */
export interface PeerBlobs {
  /** Who may hold the blob, nearest first; each `open` streams it or throws. */
  holders(digest: string): Promise<Array<{ name: string; open(): Promise<Readable> }>>;
  /** This store holds these blobs now (fetched or found). */
  holding(digests: string[]): void;
}

/** A compressed TOC larger than this is not read by range: the image is pulled whole. */
const MAX_TOC_GZ_BYTES = 64 * 1024 * 1024;
export const DEFAULT_MAX_IMAGE_BYTES = 32 * 1024 ** 3;
/** Smaller blobs (configs, tiny layers) come from the registry: a peer round trip saves nothing. */
const PEER_MIN_BYTES = 64 * 1024;
// maxImageBytes counts what a registry sends; a few KiB of gzip or zstd unpack to any size,
// and the diff_ids (the registry's word too) agree with whatever they hold. These bound what
// an unpack writes to the host's disk, and its memory (the writer keeps each entry's path).
export const DEFAULT_MAX_UNPACKED_BYTES = 64 * 1024 ** 3;
export const DEFAULT_MAX_UNPACKED_ENTRIES = 4_000_000;

export interface LayerDescriptor {
  digest: string;
  size: number;
  mediaType: string;
}

export interface PulledImage {
  /** Normalised source: `docker.io/library/alpine:latest`, `oci-archive:/abs/x.tar:tag`. */
  ref: string;
  /** Digest the reference resolved to (an index for multi-arch images): pin with `ref@digest`. */
  digest: string;
  /** Digest of the platform's image manifest (equals `digest` for single-platform images). */
  manifestDigest: string;
  configDigest: string;
  config: ImageConfig;
  layers: LayerDescriptor[];
  /** sha256 of each uncompressed layer, from the config; checked by unpack. */
  diffIds: string[];
  platform: Platform;
  /** What this pull moved: zero blobs when everything was already stored. */
  transfer: { blobsFetched: number; bytesFetched: number; layersCached: number; bytesFromPeers: number };
}

/** An eStargz layer: its TOC, read by range and verified against the manifest's annotation. */
export interface SeekableLayer {
  digest: string;
  size: number;
  tocOffset: number;
  toc: Toc;
}

/** An image every layer of which is eStargz: its files can be read one by one (see estargz.ts). */
export interface SeekableImage {
  digest: string;
  config: ImageConfig;
  layers: SeekableLayer[];
}

/** Bytes `start` to `end` (exclusive) of one of an image's layers. */
export type LayerRanges = (digest: string, start: number, end: number) => Promise<Buffer>;

export interface UnpackResult extends UnpackStats {
  dir: string;
  /** With a content store: the key of each file placed through it, by inode. */
  keysByIno: Map<number, string>;
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

export class ImageStore {
  readonly blobs: BlobStore;
  private readonly platform: Platform;
  private readonly log: (msg: string) => void;
  /** One per store: its connections are pooled across pulls. */
  private readonly net: RegistryNet;

  constructor(private readonly opts: ImageStoreOptions) {
    this.blobs = new BlobStore(opts.dir);
    this.net = opts.net ?? new RegistryNet({ allowPrivate: opts.allowPrivateRegistries ?? false });
    this.platform = opts.platform ?? hostPlatform();
    this.log = opts.log ?? (() => {});
  }

  /** `credentials`: a build's own for its registry, used instead of the credentials file's. */
  private source(input: string, credentials?: Credentials): ImageSource {
    const spec = parseSource(input);
    const name = formatSource(spec);
    switch (spec.kind) {
      case "registry": {
        const creds = credentials ?? loadCredentials(authFilePath(this.opts.authFile)).get(spec.ref.registry);
        const client = new RegistryClient(spec.ref, {
          ...(creds ? { credentials: creds } : {}),
          insecureRegistries: this.opts.insecureRegistries ?? [],
          net: this.net,
          ...(this.opts.fetchTimeoutMs ? { timeoutMs: this.opts.fetchTimeoutMs } : {}),
          ...(this.opts.maxManifestBytes ? { maxManifestBytes: this.opts.maxManifestBytes } : {}),
        });
        return new RegistrySource(name, client);
      }
      case "oci":
        return new OciLayoutSource(name, spec.dir, false, spec.tag);
      case "oci-archive":
        return new OciLayoutSource(name, spec.path, true, spec.tag);
      case "docker-archive":
        return new DockerArchiveSource(name, spec.path, spec.tag);
    }
  }

  private peers: PeerBlobs | undefined;

  /** Asks these peers for layers before the registry (a cluster node, once it has joined). */
  usePeers(peers: PeerBlobs): void {
    this.peers = peers;
  }

  /** The blob from the first peer that sends it intact; undefined when none did. */
  private async fromPeers(
    d: { digest: string; size: number },
    onBytes: (n: number) => void,
  ): Promise<"cached" | "fetched" | undefined> {
    if (!this.peers || d.size < PEER_MIN_BYTES) return undefined;
    if (await this.blobs.has(d.digest, d.size)) return "cached";
    for (const h of await this.peers.holders(d.digest).catch(() => [])) {
      try {
        const r = await this.blobs.ensure(d.digest, d.size, () => h.open(), onBytes);
        this.log(`blob ${d.digest.slice(0, 19)} from peer ${h.name}`);
        return r;
      } catch (err) {
        this.log(`blob ${d.digest.slice(0, 19)} refused from peer ${h.name}: ${(err as Error).message}`);
      }
    }
    return undefined;
  }

  /** Fetches a manifest by digest, from the store when it is there, verifying it either way. */
  private async manifestByDigest(src: ImageSource, digest: string) {
    if (await this.blobs.has(digest)) return { bytes: await this.blobs.read(digest), mediaType: "" };
    const m = await src.manifest(digest);
    await this.verified(digest, m.bytes, src.name);
    return m;
  }

  private async verified(digest: string, bytes: Buffer, name: string): Promise<void> {
    try {
      await this.blobs.putBuffer(digest, bytes);
    } catch (e) {
      if (e instanceof ImagePullError && e.code === "digest-mismatch") {
        throw new ImagePullError("digest-mismatch", `manifest digest mismatch for ${name}: ${e.message}`);
      }
      throw e;
    }
  }

  /** The digest `ref` names now (one manifest request; none when the reference pins it). */
  async resolve(ref: string): Promise<string> {
    const src = this.source(ref);
    if (src.pinnedDigest) return src.pinnedDigest;
    const root = await src.root();
    return root.pinned ?? digestOf(root.bytes);
  }

  /** The image's root digest and, for this platform, its manifest (both verified and kept). */
  private async manifestOf(
    src: ImageSource,
  ): Promise<{ digest: string; manifestDigest: string; manifest: ImageManifest }> {
    const root =
      src.pinnedDigest && (await this.blobs.has(src.pinnedDigest))
        ? { bytes: await this.blobs.read(src.pinnedDigest), mediaType: "", pinned: src.pinnedDigest }
        : await src.root();
    const digest = root.pinned ?? digestOf(root.bytes);
    await this.verified(digest, root.bytes, src.name);
    let parsed = parseManifest(root.bytes, root.mediaType);
    let manifestDigest = digest;
    if (parsed.kind === "index") {
      const d = selectPlatform(parsed, this.platform, src.name);
      const m = await this.manifestByDigest(src, d.digest);
      parsed = parseManifest(m.bytes, m.mediaType || d.mediaType);
      manifestDigest = d.digest;
      if (parsed.kind !== "manifest") throw new ImagePullError("unsupported", `nested index in ${src.name}`);
    }
    return { digest, manifestDigest, manifest: parsed };
  }

  /** The layers `ref` names now, for this platform: its manifest only, no layer is fetched. */
  async layers(ref: string): Promise<Array<{ digest: string; size: number }>> {
    const { manifest } = await this.manifestOf(this.source(ref));
    return manifest.layers.map((l) => ({ digest: l.digest, size: l.size }));
  }

  /**
   * The image `ref` names as seekable layers: its manifest and config (kept in the store) and
   * each layer's TOC, read by two range requests per layer. Undefined when a layer is not
   * eStargz (no TOC annotation) or the source serves no ranges: such an image is pulled whole.
   */
  async seekable(ref: string): Promise<SeekableImage | undefined> {
    const src = this.source(ref);
    if (!src.range) return undefined;
    const { digest, manifest } = await this.manifestOf(src);
    if (!manifest.layers.length || manifest.layers.some((l) => !l.annotations?.[TOC_DIGEST_ANNOTATION])) {
      return undefined;
    }
    await this.blobs.ensure(manifest.config.digest, manifest.config.size, () => src.blob(manifest.config.digest));
    const { config } = parseConfig(await this.blobs.read(manifest.config.digest));
    const ranges = this.ranges(ref);
    const layers = await Promise.all(
      manifest.layers.map(async (l): Promise<SeekableLayer | undefined> => {
        if (l.size <= FOOTER_SIZE) return undefined;
        const off = tocOffset(await ranges(l.digest, l.size - FOOTER_SIZE, l.size));
        if (off === undefined || off >= l.size - FOOTER_SIZE) return undefined;
        const tocBytes = l.size - FOOTER_SIZE - off;
        if (tocBytes > MAX_TOC_GZ_BYTES) return undefined;
        const toc = await parseToc(
          await ranges(l.digest, off, l.size - FOOTER_SIZE),
          l.annotations?.[TOC_DIGEST_ANNOTATION] ?? "",
        );
        return { digest: l.digest, size: l.size, tocOffset: off, toc };
      }),
    );
    if (layers.some((l) => !l)) return undefined;
    return { digest, config, layers: layers as SeekableLayer[] };
  }

  /** Reads layers of `ref` by range: from the store when a layer is here, else from its registry. */
  ranges(ref: string): LayerRanges {
    const src = this.source(ref);
    return async (digest, start, end) => {
      if (await this.blobs.has(digest)) {
        const fh = await open(this.blobs.path(digest), "r");
        try {
          const b = Buffer.alloc(end - start);
          const { bytesRead } = await fh.read(b, 0, b.length, start);
          if (bytesRead === b.length) return b;
        } finally {
          await fh.close();
        }
      }
      const b = await src.range?.(digest, start, end);
      if (!b) throw new ImagePullError("unsupported", `${src.name}: the registry does not serve byte ranges`);
      return b;
    };
  }

  /** Resolves `ref`, picks the platform, and makes sure config and layers are in the store. */
  async pull(
    ref: string,
    onProgress?: ProgressCallback,
    budget?: DiskBudget,
    credentials?: Credentials,
  ): Promise<PulledImage> {
    const src = this.source(ref, credentials);
    const transfer = { blobsFetched: 0, bytesFetched: 0, layersCached: 0, bytesFromPeers: 0 };
    const { digest, manifestDigest, manifest } = await this.manifestOf(src);
    // Sizes are the manifest's word, and the blob store refuses a blob past its descriptor's
    // size: checking them here bounds what the pull may write before a byte moves.
    const maxConfig = this.opts.maxManifestBytes ?? DEFAULT_MAX_MANIFEST_BYTES;
    if (manifest.config.size > maxConfig) {
      throw new ImagePullError(
        "too-large",
        `${src.name}: image config is ${manifest.config.size} bytes, over ${maxConfig}`,
      );
    }
    const total = manifest.layers.reduce((n, l) => n + l.size, manifest.config.size);
    const maxImage = this.opts.maxImageBytes ?? DEFAULT_MAX_IMAGE_BYTES;
    if (total > maxImage) {
      throw new ImagePullError("too-large", `${src.name}: image is ${total} bytes, over the limit of ${maxImage}`);
    }
    // Config first: small, and it says whether this is an image for us at all.
    const fetchBlob = async (d: { digest: string; size: number }, onBytes?: (n: number) => void) => {
      let n = 0;
      const count = (b: number) => {
        n = b;
        onBytes?.(b);
      };
      let r = await this.fromPeers(d, count);
      if (r === "fetched") transfer.bytesFromPeers += n;
      r ??= await this.blobs.ensure(d.digest, d.size, () => src.blob(d.digest), count);
      if (r === "fetched") {
        transfer.blobsFetched++;
        transfer.bytesFetched += n;
      }
      return r;
    };
    await fetchBlob(manifest.config);
    const { config, platform, diffIds } = parseConfig(await this.blobs.read(manifest.config.digest));
    if (diffIds.length && diffIds.length !== manifest.layers.length) {
      throw new ImagePullError(
        "unsupported",
        `${src.name}: config lists ${diffIds.length} layers, manifest ${manifest.layers.length}`,
      );
    }
    if (platform.architecture && platform.architecture !== this.platform.architecture) {
      this.log(`warning: ${src.name} is ${formatPlatform(platform)}, not ${formatPlatform(this.platform)}`);
    }
    const progress = new ProgressTracker("pull", manifest.layers, onProgress);
    let missing = 0;
    for (const l of manifest.layers) if (!(await this.blobs.has(l.digest, l.size))) missing += l.size;
    const fetched = missing > 0 && budget ? await budget.room(missing) : undefined;
    const before = transfer.bytesFetched;
    try {
      await forEachLimit(
        manifest.layers.map((l, i) => [l, i] as const),
        this.opts.concurrency ?? 3,
        async ([l, i]) => {
          let started = false;
          const r = await fetchBlob(l, (n) => {
            if (!started) progress.state(i, "downloading");
            started = true;
            progress.bytes(i, n);
          });
          if (r === "cached") transfer.layersCached++;
          progress.state(i, r === "cached" ? "cached" : "done");
        },
      );
    } finally {
      fetched?.(onDisk(transfer.bytesFetched - before));
    }
    this.peers?.holding(manifest.layers.map((l) => l.digest));
    this.log(
      `pulled ${src.name}: ${manifest.layers.length} layers, ${transfer.blobsFetched} blobs fetched (${transfer.bytesFetched} bytes), ${transfer.layersCached} layers cached`,
    );
    return {
      ref: src.name,
      digest,
      manifestDigest,
      configDigest: manifest.config.digest,
      config,
      layers: manifest.layers.map((l) => ({ digest: l.digest, size: l.size, mediaType: l.mediaType })),
      diffIds,
      platform,
      transfer,
    };
  }

  /**
   * Applies the image's layers, in order, to a new directory `destDir` (which must not exist).
   * Work happens in a sibling temp dir renamed at the end, so a failure leaves nothing behind.
   */
  async unpack(
    image: Pick<PulledImage, "ref" | "layers" | "diffIds">,
    destDir: string,
    onProgress?: ProgressCallback,
    /** Store files by content and link them (trees that are only read: see ContentStore). */
    content?: UnpackContent,
  ): Promise<UnpackResult> {
    for (const l of image.layers) {
      if (!(await this.blobs.has(l.digest, l.size))) {
        throw new ImagePullError(
          "blob-missing",
          `layer ${l.digest} of ${image.ref} is not in the store (pull it first)`,
        );
      }
    }
    if (await exists(destDir)) throw new ImagePullError("destination-exists", `${destDir} already exists`);
    await mkdir(dirname(destDir), { recursive: true });
    const tmp = join(dirname(destDir), `.${basename(destDir)}.partial-${randomBytes(6).toString("hex")}`);
    await mkdir(tmp, { mode: 0o755 });
    const writer = new RootfsWriter(tmp, this.log, content);
    const progress = new ProgressTracker("unpack", image.layers, onProgress);
    const maxBytes = this.opts.maxUnpackedBytes ?? DEFAULT_MAX_UNPACKED_BYTES;
    const maxEntries = this.opts.maxUnpackedEntries ?? DEFAULT_MAX_UNPACKED_ENTRIES;
    let bytes = 0;
    let entries = 0;
    try {
      for (const [i, l] of image.layers.entries()) {
        progress.state(i, "extracting");
        const hash = createHash("sha256");
        const tarBytes = async function* (src: AsyncIterable<Buffer>) {
          for await (const c of src) {
            bytes += c.length;
            if (bytes > maxBytes) {
              throw new ImagePullError("too-large", `${image.ref} unpacks to more than ${maxBytes} bytes`);
            }
            hash.update(c);
            yield c;
          }
        };
        const counted = async function* (src: AsyncIterable<TarEntry>) {
          for await (const e of src) {
            if (++entries > maxEntries) {
              throw new ImagePullError("too-large", `${image.ref} has more than ${maxEntries} entries`);
            }
            yield e;
          }
        };
        const stream = decompressFile(this.blobs.path(l.digest), (n) => progress.bytes(i, n));
        try {
          await writer.applyLayer(counted(readTar(tarBytes(stream))));
        } catch (e) {
          if (e instanceof ImagePullError) {
            e.message = `${e.message} (layer ${i + 1}/${image.layers.length} ${l.digest.slice(0, 19)} of ${image.ref})`;
          }
          throw e;
        }
        const diffId = `sha256:${hash.digest("hex")}`;
        const want = image.diffIds[i];
        if (want?.startsWith("sha256:") && want !== diffId) {
          throw new ImagePullError(
            "digest-mismatch",
            `layer ${l.digest} of ${image.ref} unpacks to ${diffId}, config says ${want}`,
          );
        }
        progress.state(i, "extracted");
      }
      await writer.finish();
      await publishTree(tmp, destDir);
    } catch (e) {
      await rm(tmp, { recursive: true, force: true });
      throw e;
    }
    this.log(`unpacked ${image.ref} into ${destDir}: ${JSON.stringify(writer.stats)}`);
    return { dir: destDir, ...writer.stats, keysByIno: writer.keysByIno };
  }
}
