/** Image references and sources, normalised the way docker does (`alpine` → `docker.io/library/alpine:latest`). */
import { resolve } from "node:path";
import { ImagePullError } from "./errors.js";

export interface ImageReference {
  /** Registry as users write it: `docker.io`, `ghcr.io`, `localhost:5000`. */
  registry: string;
  /** Host[:port] the HTTP API lives on (`registry-1.docker.io` for docker.io). */
  apiHost: string;
  /** Repository path: `library/alpine`. */
  repository: string;
  tag?: string;
  /** `sha256:…` when pinned; wins over the tag when fetching. */
  digest?: string;
}

export type ImageSourceSpec =
  | { kind: "registry"; ref: ImageReference }
  | { kind: "oci"; dir: string; tag?: string }
  | { kind: "oci-archive"; path: string; tag?: string }
  | { kind: "docker-archive"; path: string; tag?: string };

const DIGEST = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const HOST =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::\d+)?$/;

export function isDigest(s: string): boolean {
  return DIGEST.test(s);
}

const bad = (ref: string, why: string) =>
  new ImagePullError("bad-reference", `invalid image reference ${JSON.stringify(ref)}: ${why}`);

export function parseReference(input: string): ImageReference {
  let rest = input.trim();
  if (rest.startsWith("docker://")) rest = rest.slice("docker://".length);
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!isDigest(digest)) throw bad(input, "digest must be sha256:<64 hex> or sha512:<128 hex>");
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw bad(input, `bad tag ${JSON.stringify(tag)}`);
  }
  // The first component is a registry host if it looks like one (docker's rule).
  let registry = "docker.io";
  const slash = rest.indexOf("/");
  const first = slash >= 0 ? rest.slice(0, slash) : "";
  if (slash >= 0 && (first.includes(".") || first.includes(":") || first === "localhost" || first.startsWith("["))) {
    registry = first;
    rest = rest.slice(slash + 1);
    if (!HOST.test(registry)) throw bad(input, `bad registry host ${JSON.stringify(registry)}`);
  }
  if (registry === "index.docker.io" || registry === "registry-1.docker.io") registry = "docker.io";
  if (registry === "docker.io" && !rest.includes("/")) rest = `library/${rest}`;
  if (rest === "") throw bad(input, "empty repository");
  for (const c of rest.split("/")) {
    if (!COMPONENT.test(c))
      throw bad(input, `bad repository component ${JSON.stringify(c)} (lowercase letters, digits, . _ -)`);
  }
  if (!digest && !tag) tag = "latest";
  return {
    registry,
    apiHost: registry === "docker.io" ? "registry-1.docker.io" : registry,
    repository: rest,
    ...(tag !== undefined ? { tag } : {}),
    ...(digest !== undefined ? { digest } : {}),
  };
}

export function formatReference(r: ImageReference): string {
  return `${r.registry}/${r.repository}${r.tag ? `:${r.tag}` : ""}${r.digest ? `@${r.digest}` : ""}`;
}

/** Splits `PATH[:tag]`: the last `:` starts a tag only if what follows has no `/`. */
function pathAndTag(s: string): { path: string; tag?: string } {
  const i = s.lastIndexOf(":");
  if (i > 0 && !s.slice(i + 1).includes("/")) return { path: resolve(s.slice(0, i)), tag: s.slice(i + 1) };
  return { path: resolve(s) };
}

/** `oci:DIR[:tag]`, `oci-archive:PATH[:tag]`, `docker-archive:PATH[:repo:tag]`, else a registry reference. */
export function parseSource(input: string): ImageSourceSpec {
  const m = /^(oci|oci-archive|docker-archive):(.+)$/.exec(input);
  if (!m) return { kind: "registry", ref: parseReference(input) };
  const kind = m[1] as "oci" | "oci-archive" | "docker-archive";
  const body = m[2]!;
  if (kind === "docker-archive") {
    // docker-archive:PATH:repo:tag — like skopeo, the path ends at the first ':' (the tag may hold '/' and ':').
    const c = body.indexOf(":");
    if (c > 0) return { kind, path: resolve(body.slice(0, c)), tag: body.slice(c + 1) };
    return { kind, path: resolve(body) };
  }
  const { path, tag } = pathAndTag(body);
  return kind === "oci" ? { kind, dir: path, ...(tag ? { tag } : {}) } : { kind, path, ...(tag ? { tag } : {}) };
}

/**
 * Whether an image source names a path on this host (`oci:`, `oci-archive:`,
 * `docker-archive:`) rather than a registry: such sources read host files, so only the
 * operator may use them (images.allow_host_sources).
 */
export function isHostPathSource(input: string): boolean {
  return /^(oci|oci-archive|docker-archive):/.test(input);
}

export function formatSource(s: ImageSourceSpec): string {
  switch (s.kind) {
    case "registry":
      return formatReference(s.ref);
    case "oci":
      return `oci:${s.dir}${s.tag ? `:${s.tag}` : ""}`;
    default:
      return `${s.kind}:${s.path}${s.tag ? `:${s.tag}` : ""}`;
  }
}
