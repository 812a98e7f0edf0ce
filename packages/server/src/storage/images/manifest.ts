/** OCI / Docker schema2 manifests, indexes and image configs: parsing, validation, platform choice. */
import { ImagePullError } from "./errors.js";
import { isDigest } from "./reference.js";

export const MT = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  ociLayer: "application/vnd.oci.image.layer.v1.tar",
  ociLayerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  ociLayerZstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
  dockerLayerGzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
  dockerForeignGzip: "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
} as const;

export const MANIFEST_ACCEPT = [MT.ociIndex, MT.dockerList, MT.ociManifest, MT.dockerManifest].join(", ");

const LAYER_TYPES = new Set<string>([
  MT.ociLayer,
  MT.ociLayerGzip,
  MT.ociLayerZstd,
  MT.dockerLayerGzip,
  MT.dockerForeignGzip,
  "application/vnd.oci.image.layer.nondistributable.v1.tar",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
  "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
]);

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
}

export interface ImageManifest {
  kind: "manifest";
  mediaType: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface ImageIndex {
  kind: "index";
  mediaType: string;
  manifests: Descriptor[];
}

/** What a container runtime needs from the image config, flattened. */
export interface ImageConfig {
  env: Record<string, string>;
  workdir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  /** `80/tcp`, `53/udp`. */
  exposedPorts: string[];
  labels: Record<string, string>;
  stopSignal?: string;
}

export interface ParsedConfig {
  config: ImageConfig;
  platform: Platform;
  /** sha256 of each uncompressed layer tar, in order (verified while unpacking). */
  diffIds: string[];
}

/** Node's process.arch → OCI architecture names. */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ia32: "386", ppc64: "ppc64le" };
  return { os: "linux", architecture: arch[process.arch] ?? process.arch };
}

export const formatPlatform = (p: Platform) => `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ""}`;

function obj(v: unknown, what: string): Record<string, unknown> {
  if (!v || typeof v !== "object" || Array.isArray(v))
    throw new ImagePullError("unsupported", `${what} is not a JSON object`);
  return v as Record<string, unknown>;
}

function descriptor(v: unknown, what: string): Descriptor {
  const d = obj(v, what);
  if (typeof d.digest !== "string" || !isDigest(d.digest))
    throw new ImagePullError("unsupported", `${what}: bad digest`);
  if (typeof d.size !== "number" || !Number.isSafeInteger(d.size) || d.size < 0) {
    throw new ImagePullError("unsupported", `${what}: bad size`);
  }
  const out: Descriptor = {
    mediaType: typeof d.mediaType === "string" ? d.mediaType : "",
    digest: d.digest,
    size: d.size,
  };
  if (d.platform && typeof d.platform === "object") {
    const p = d.platform as Record<string, unknown>;
    out.platform = {
      os: String(p.os ?? ""),
      architecture: String(p.architecture ?? ""),
      ...(typeof p.variant === "string" && p.variant ? { variant: p.variant } : {}),
    };
  }
  if (d.annotations && typeof d.annotations === "object") out.annotations = d.annotations as Record<string, string>;
  return out;
}

/** Parses a manifest or an index; `headerType` (Content-Type) helps when the body has no mediaType. */
export function parseManifest(bytes: Buffer, headerType = ""): ImageManifest | ImageIndex {
  let doc: Record<string, unknown>;
  try {
    doc = obj(JSON.parse(bytes.toString("utf8")), "manifest");
  } catch (e) {
    if (e instanceof ImagePullError) throw e;
    throw new ImagePullError("unsupported", "manifest is not valid JSON", { cause: e });
  }
  const mediaType = typeof doc.mediaType === "string" && doc.mediaType ? doc.mediaType : headerType;
  if (doc.schemaVersion === 1 || mediaType.startsWith("application/vnd.docker.distribution.manifest.v1")) {
    throw new ImagePullError("unsupported", "Docker schema 1 manifests are not supported (re-push the image)");
  }
  if (mediaType === MT.ociIndex || mediaType === MT.dockerList || (!mediaType && Array.isArray(doc.manifests))) {
    if (!Array.isArray(doc.manifests)) throw new ImagePullError("unsupported", "index without manifests");
    return {
      kind: "index",
      mediaType: mediaType || MT.ociIndex,
      manifests: doc.manifests.map((m, i) => descriptor(m, `index entry ${i}`)),
    };
  }
  if (mediaType === MT.ociManifest || mediaType === MT.dockerManifest || (!mediaType && doc.config)) {
    if (!Array.isArray(doc.layers)) throw new ImagePullError("unsupported", "manifest without layers");
    const config = descriptor(doc.config, "config");
    if (config.mediaType && config.mediaType !== MT.ociConfig && config.mediaType !== MT.dockerConfig) {
      throw new ImagePullError("unsupported", `not a container image (config media type ${config.mediaType})`);
    }
    const layers = doc.layers.map((l, i) => descriptor(l, `layer ${i}`));
    for (const l of layers) {
      if (l.mediaType && !LAYER_TYPES.has(l.mediaType)) {
        throw new ImagePullError("unsupported", `unsupported layer media type ${l.mediaType} (${l.digest})`);
      }
    }
    return { kind: "manifest", mediaType: mediaType || MT.ociManifest, config, layers };
  }
  throw new ImagePullError("unsupported", `unsupported manifest media type ${JSON.stringify(mediaType)}`);
}

function matches(p: Platform | undefined, want: Platform): boolean {
  if (!p || p.os !== want.os || p.architecture !== want.architecture) return false;
  if (!want.variant) return true;
  // arm64 images usually omit "v8".
  return (p.variant ?? (p.architecture === "arm64" ? "v8" : "")) === want.variant;
}

/** Picks the index entry for `want`; the error lists what the index does offer. */
export function selectPlatform(index: ImageIndex, want: Platform, ref: string): Descriptor {
  const images = index.manifests.filter((m) => m.platform?.os !== "unknown"); // skip attestation manifests
  const hit = images.find((m) => matches(m.platform, want));
  if (hit) return hit;
  const available = images.map((m) => (m.platform ? formatPlatform(m.platform) : "unspecified"));
  throw new ImagePullError(
    "no-platform",
    `no ${formatPlatform(want)} image in ${ref} (available: ${available.join(", ") || "none"})`,
  );
}

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) && v.every((x) => typeof x === "string") ? v : undefined;
}

export function parseConfig(bytes: Buffer): ParsedConfig {
  let doc: Record<string, unknown>;
  try {
    doc = obj(JSON.parse(bytes.toString("utf8")), "image config");
  } catch (e) {
    if (e instanceof ImagePullError) throw e;
    throw new ImagePullError("unsupported", "image config is not valid JSON", { cause: e });
  }
  const c = (doc.config && typeof doc.config === "object" ? doc.config : {}) as Record<string, unknown>;
  const env: Record<string, string> = {};
  for (const kv of strings(c.Env) ?? []) {
    const i = kv.indexOf("=");
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
    else env[kv] = "";
  }
  const config: ImageConfig = {
    env,
    exposedPorts: c.ExposedPorts && typeof c.ExposedPorts === "object" ? Object.keys(c.ExposedPorts) : [],
    labels: c.Labels && typeof c.Labels === "object" ? { ...(c.Labels as Record<string, string>) } : {},
  };
  if (typeof c.WorkingDir === "string" && c.WorkingDir) config.workdir = c.WorkingDir;
  if (typeof c.User === "string" && c.User) config.user = c.User;
  const entrypoint = strings(c.Entrypoint);
  if (entrypoint) config.entrypoint = entrypoint;
  const cmd = strings(c.Cmd);
  if (cmd) config.cmd = cmd;
  if (typeof c.StopSignal === "string" && c.StopSignal) config.stopSignal = c.StopSignal;
  const rootfs = (doc.rootfs ?? {}) as { diff_ids?: unknown };
  return {
    config,
    platform: {
      os: String(doc.os ?? "linux"),
      architecture: String(doc.architecture ?? ""),
      ...(typeof doc.variant === "string" && doc.variant ? { variant: doc.variant } : {}),
    },
    diffIds: strings(rootfs.diff_ids) ?? [],
  };
}
