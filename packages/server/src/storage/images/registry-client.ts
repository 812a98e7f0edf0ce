/** OCI Distribution / Docker Registry HTTP API v2: manifests and blobs of one repository. */
import { Readable, Transform } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import type { Response } from "undici";
import { type Credentials, RegistryAuth } from "./auth.js";
import { ImagePullError } from "./errors.js";
import { MANIFEST_ACCEPT } from "./manifest.js";
import { formatReference, type ImageReference } from "./reference.js";
import { RegistryNet } from "./registry-net.js";

export interface RegistryClientOptions {
  credentials?: Credentials;
  /** Hosts (`host` or `host:port`) reached over plain HTTP besides loopback ones. */
  insecureRegistries?: readonly string[];
  /** Counts requests, for tests and stats. */
  onRequest?: (kind: "manifest" | "blob", url: string) => void;
  /**
   * A registry silent this long is given up on: no response headers, no manifest, or no blob
   * bytes for this long (default 60 s). A slow registry is fine; a stalled one is not.
   */
  timeoutMs?: number;
  /** Largest manifest or index accepted (default 4 MiB); a registry sending more is refused. */
  maxManifestBytes?: number;
  /** Where requests may go (default: public addresses only; see registry-net.ts). */
  net?: RegistryNet;
}

export const DEFAULT_FETCH_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

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
  private readonly net: RegistryNet;

  constructor(
    readonly ref: ImageReference,
    private readonly opts: RegistryClientOptions = {},
  ) {
    this.base = `${registryScheme(ref.apiHost, opts.insecureRegistries)}://${ref.apiHost}/v2/${ref.repository}`;
    this.net = opts.net ?? new RegistryNet();
    this.auth = new RegistryAuth(ref.apiHost, opts.credentials, `repository:${ref.repository}:pull`, this.net);
  }

  private get timeoutMs(): number {
    return this.opts.timeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS;
  }

  private stalled(what: string): ImagePullError {
    return new ImagePullError(
      "timeout",
      `registry ${this.ref.apiHost} sent nothing for ${Math.round(this.timeoutMs / 1000)} s (${what}); giving up`,
    );
  }

  /** fetch with a deadline for the response head; the controller also aborts the body later. */
  private async request(
    kind: "manifest" | "blob",
    url: string,
    accept?: string,
    range?: string,
  ): Promise<{ res: Response; abort: AbortController }> {
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = {};
      if (accept) headers.accept = accept;
      if (range) headers.range = range;
      const authz = this.auth.authorization();
      if (authz) headers.authorization = authz;
      this.opts.onRequest?.(kind, url);
      let res: Response;
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(this.stalled(`${kind} response`)), this.timeoutMs);
      try {
        // Redirects (blob storage on another host) are followed, each hop checked; Authorization
        // is dropped cross-origin.
        res = await this.net.fetch(url, { headers, signal: abort.signal });
      } catch (e) {
        if (abort.signal.aborted) throw abort.signal.reason as ImagePullError;
        if (e instanceof ImagePullError) throw e;
        const cause = (e as { cause?: { message?: string } }).cause?.message;
        throw new ImagePullError(
          "network",
          `cannot reach registry ${this.ref.apiHost}: ${cause ?? (e as Error).message}`,
          { cause: e },
        );
      } finally {
        clearTimeout(timer);
      }
      if (res.status === 401 && attempt < 2) {
        await res.body?.cancel();
        if (await this.auth.onUnauthorized(res.headers.get("www-authenticate"))) continue;
        throw new ImagePullError(
          "unauthorized",
          `unauthorized: ${formatReference(this.ref)}${this.opts.credentials ? " (credentials refused)" : " (no credentials for " + this.ref.registry + ")"}`,
        );
      }
      return { res, abort };
    }
  }

  /**
   * A body read within `max` bytes and the timeout (a huge or endless one is cut): a manifest,
   * or a range of a blob. `tooLarge` is the error for a body over `max`; `what` names it.
   */
  private async readBounded(
    res: Response,
    abort: AbortController,
    max: number,
    what: string,
    tooLarge: () => ImagePullError,
  ): Promise<Buffer> {
    const declared = Number(res.headers.get("content-length"));
    if (res.headers.has("content-length") && declared > max) {
      abort.abort(tooLarge());
      throw tooLarge();
    }
    const timer = setTimeout(() => abort.abort(this.stalled(what)), this.timeoutMs);
    const parts: Buffer[] = [];
    let n = 0;
    try {
      const reader = (res.body as WebReadableStream<Uint8Array> | null)?.getReader();
      if (!reader) return Buffer.alloc(0);
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        n += value.length;
        if (n > max) {
          abort.abort(tooLarge());
          throw tooLarge();
        }
        parts.push(Buffer.from(value));
      }
    } catch (e) {
      if (abort.signal.aborted) throw abort.signal.reason as ImagePullError;
      throw new ImagePullError("network", `${what}: ${(e as Error).message}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
    return Buffer.concat(parts);
  }

  /** A manifest body, read within the size limit and the timeout. */
  private readManifest(res: Response, abort: AbortController, reference: string): Promise<Buffer> {
    const max = this.opts.maxManifestBytes ?? DEFAULT_MAX_MANIFEST_BYTES;
    return this.readBounded(
      res,
      abort,
      max,
      `manifest ${reference}`,
      () =>
        new ImagePullError("too-large", `manifest ${reference} of ${formatReference(this.ref)} is over ${max} bytes`),
    );
  }

  /** Fetches a manifest or index by tag or digest; verification is the caller's job. */
  async getManifest(reference: string): Promise<{ bytes: Buffer; mediaType: string }> {
    const { res, abort } = await this.request("manifest", `${this.base}/manifests/${reference}`, MANIFEST_ACCEPT);
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
    const bytes = await this.readManifest(res, abort, reference);
    const mediaType = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
    return { bytes, mediaType };
  }

  /**
   * Bytes `start` to `end` (exclusive) of a blob, by an HTTP range request; undefined when the
   * registry answers with the whole blob instead (it does not serve ranges).
   */
  async getBlobRange(digest: string, start: number, end: number): Promise<Buffer | undefined> {
    const url = `${this.base}/blobs/${digest}`;
    const { res, abort } = await this.request("blob", url, undefined, `bytes=${start}-${end - 1}`);
    if (res.status === 200) {
      abort.abort(new ImagePullError("registry", "range ignored"));
      return undefined;
    }
    if (res.status !== 206) {
      throw new ImagePullError(
        res.status === 404 ? "blob-missing" : "registry",
        `blob ${digest} of ${formatReference(this.ref)} bytes ${start}-${end - 1}: ${await registryError(res)}`,
      );
    }
    const want = end - start;
    // Never more than was asked for: a registry that sends more is cut off.
    const body = await this.readBounded(
      res,
      abort,
      want,
      `blob ${digest} range`,
      () => new ImagePullError("bad-layer", `blob ${digest}: sent more than the ${want} bytes asked for at ${start}`),
    );
    if (body.length !== want) {
      throw new ImagePullError("bad-layer", `blob ${digest}: asked for ${want} bytes at ${start}, got ${body.length}`);
    }
    return body;
  }

  /** Opens a blob for streaming; `size` is the Content-Length when the registry sent one. */
  async getBlob(digest: string): Promise<{ body: Readable; size?: number }> {
    const { res, abort } = await this.request("blob", `${this.base}/blobs/${digest}`);
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
    // No byte for timeoutMs: the download is given up (the transfer is aborted, the reader errors).
    let timer: NodeJS.Timeout | undefined;
    const src = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
    const watched = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        arm();
        cb(null, chunk);
      },
      flush(cb) {
        clearTimeout(timer);
        cb();
      },
    });
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const err = this.stalled(`blob ${digest}`);
        abort.abort(err);
        watched.destroy(err);
      }, this.timeoutMs);
    };
    arm();
    src.on("error", (e) => watched.destroy(abort.signal.aborted ? (abort.signal.reason as Error) : e));
    watched.on("close", () => {
      clearTimeout(timer);
      src.destroy();
    });
    src.pipe(watched);
    return {
      body: watched,
      ...(Number.isFinite(len) && len >= 0 && res.headers.has("content-length") ? { size: len } : {}),
    };
  }
}
