/** OCI Distribution / Docker Registry HTTP API v2: manifests and blobs of one repository. */
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { type Credentials, RegistryAuth } from "./auth.js";
import { ImagePullError } from "./errors.js";
import { MANIFEST_ACCEPT } from "./manifest.js";
import { formatReference, type ImageReference } from "./reference.js";

export interface RegistryClientOptions {
  credentials?: Credentials;
  /** Hosts (`host` or `host:port`) reached over plain HTTP besides loopback ones. */
  insecureRegistries?: readonly string[];
  /** Counts requests, for tests and stats. */
  onRequest?: (kind: "manifest" | "blob", url: string) => void;
}

function hostname(hostPort: string): string {
  if (hostPort.startsWith("[")) return hostPort.slice(1, hostPort.indexOf("]"));
  return hostPort.split(":")[0]!;
}

/** Loopback registries and explicitly listed ones speak HTTP; everything else HTTPS. */
export function registryScheme(apiHost: string, insecure: readonly string[] = []): "http" | "https" {
  const h = hostname(apiHost).toLowerCase();
  if (h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h)) return "http";
  return insecure.includes(apiHost) || insecure.includes(h) ? "http" : "https";
}

async function registryError(res: Response): Promise<string> {
  const text = await res.text().catch(() => "");
  try {
    const e = (JSON.parse(text) as { errors?: { code?: string; message?: string }[] }).errors?.[0];
    if (e) return `${e.code ?? res.status}${e.message ? `: ${e.message}` : ""}`;
  } catch {}
  return `HTTP ${res.status}${text ? ` ${text.slice(0, 200).trim()}` : ""}`;
}

export class RegistryClient {
  private readonly base: string;
  private readonly auth: RegistryAuth;

  constructor(
    readonly ref: ImageReference,
    private readonly opts: RegistryClientOptions = {},
  ) {
    this.base = `${registryScheme(ref.apiHost, opts.insecureRegistries)}://${ref.apiHost}/v2/${ref.repository}`;
    this.auth = new RegistryAuth(ref.apiHost, opts.credentials, `repository:${ref.repository}:pull`);
  }

  private async request(kind: "manifest" | "blob", url: string, accept?: string): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = {};
      if (accept) headers.accept = accept;
      const authz = this.auth.authorization();
      if (authz) headers.authorization = authz;
      this.opts.onRequest?.(kind, url);
      let res: Response;
      try {
        // Redirects (blob storage on another host) are followed; fetch drops Authorization cross-origin.
        res = await fetch(url, { headers, redirect: "follow" });
      } catch (e) {
        const cause = (e as { cause?: { message?: string } }).cause?.message;
        throw new ImagePullError(
          "network",
          `cannot reach registry ${this.ref.apiHost}: ${cause ?? (e as Error).message}`,
          { cause: e },
        );
      }
      if (res.status === 401 && attempt < 2) {
        await res.body?.cancel();
        if (await this.auth.onUnauthorized(res.headers.get("www-authenticate"))) continue;
        throw new ImagePullError(
          "unauthorized",
          `unauthorized: ${formatReference(this.ref)}${this.opts.credentials ? " (credentials refused)" : " (no credentials for " + this.ref.registry + ")"}`,
        );
      }
      return res;
    }
  }

  /** Fetches a manifest or index by tag or digest; verification is the caller's job. */
  async getManifest(reference: string): Promise<{ bytes: Buffer; mediaType: string }> {
    const res = await this.request("manifest", `${this.base}/manifests/${reference}`, MANIFEST_ACCEPT);
    if (res.status === 404) {
      await res.body?.cancel();
      const shown = formatReference({
        ...this.ref,
        ...(reference.includes(":") ? { digest: reference, tag: undefined } : {}),
      });
      throw new ImagePullError("manifest-unknown", `manifest unknown: ${shown}`);
    }
    if (!res.ok)
      throw new ImagePullError(
        "registry",
        `manifest ${reference} of ${formatReference(this.ref)}: ${await registryError(res)}`,
      );
    const bytes = Buffer.from(await res.arrayBuffer());
    const mediaType = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
    return { bytes, mediaType };
  }

  /** Opens a blob for streaming; `size` is the Content-Length when the registry sent one. */
  async getBlob(digest: string): Promise<{ body: Readable; size?: number }> {
    const res = await this.request("blob", `${this.base}/blobs/${digest}`);
    if (res.status === 404) {
      await res.body?.cancel();
      throw new ImagePullError("blob-missing", `blob unknown: ${digest} in ${formatReference(this.ref)}`);
    }
    if (!res.ok || !res.body) {
      throw new ImagePullError(
        "registry",
        `blob ${digest} of ${formatReference(this.ref)}: ${await registryError(res)}`,
      );
    }
    const len = Number(res.headers.get("content-length"));
    return {
      body: Readable.fromWeb(res.body as WebReadableStream<Uint8Array>),
      ...(Number.isFinite(len) && len >= 0 && res.headers.has("content-length") ? { size: len } : {}),
    };
  }
}
