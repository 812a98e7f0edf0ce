/**
 * Test helpers for the image library: a real `docker-registry` on loopback, an OCI layout
 * builder (tar layers written here, byte by byte), skopeo pushes, and an auth/counting proxy.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import { createServer as netServer } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { gzipSync } from "node:zlib";
import {
  BLOCK,
  EXTENSION_FLAGS,
  FIELD,
  headerChecksum,
  paxRecord,
  TYPEFLAG,
  USTAR_MAGIC,
} from "../../src/storage/images/ustar.js";
import type { EStargzLayer } from "./estargz.js";

const run = promisify(execFile);
const TOC_DIGEST_ANNOTATION = "containerd.io/snapshot/stargz/toc.digest";

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = netServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface Registry {
  /** `127.0.0.1:PORT` */
  host: string;
  /** Filesystem storage root (blobs under docker/registry/v2/blobs). */
  storage: string;
  stop(): Promise<void>;
}

export async function startRegistry(): Promise<Registry> {
  const dir = mkdtempSync("/var/tmp/aenv-registry-");
  const port = await freePort();
  const storage = join(dir, "storage");
  mkdirSync(storage);
  writeFileSync(
    join(dir, "config.yml"),
    [
      "version: 0.1",
      "log: { level: error, accesslog: { disabled: true } }",
      `storage: { filesystem: { rootdirectory: ${storage} }, delete: { enabled: true } }`,
      `http: { addr: 127.0.0.1:${port} }`,
      "",
    ].join("\n"),
  );
  const proc: ChildProcess = spawn("/usr/bin/docker-registry", ["serve", join(dir, "config.yml")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const gone = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await Promise.race([gone, new Promise((r) => setTimeout(r, 3000))]);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (proc.exitCode !== null) {
      await stop();
      throw new Error(`docker-registry exited: ${stderr}`);
    }
    const ok = await fetch(`http://127.0.0.1:${port}/v2/`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`docker-registry did not answer: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { host: `127.0.0.1:${port}`, storage, stop };
}

// ---------------------------------------------------------------- tar writing

export interface TarSpec {
  name: string;
  type?: "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo";
  content?: Buffer | string;
  mode?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  linkname?: string;
}

function octal(n: number, width: number): string {
  return `${n.toString(8).padStart(width - 1, "0")}\0`;
}

function header(name: string, type: string, size: number, s: TarSpec, linkname: string): Buffer {
  const h = Buffer.alloc(BLOCK);
  const put = ([at, len]: readonly [number, number], v: string, enc: BufferEncoding = "latin1") =>
    h.write(v, at, len, enc);
  put(FIELD.name, name, "utf8");
  put(FIELD.mode, octal(s.mode ?? (s.type === "dir" ? 0o755 : 0o644), FIELD.mode[1]));
  put(FIELD.uid, octal(s.uid ?? 0, FIELD.uid[1]));
  put(FIELD.gid, octal(s.gid ?? 0, FIELD.gid[1]));
  put(FIELD.size, octal(size, FIELD.size[1]));
  put(FIELD.mtime, octal(s.mtime ?? 1_700_000_000, FIELD.mtime[1]));
  put(FIELD.typeflag, type);
  put(FIELD.linkname, linkname, "utf8");
  put(FIELD.magic, USTAR_MAGIC);
  put(FIELD.version, "00");
  put(FIELD.checksum, `${headerChecksum(h).toString(8).padStart(6, "0")}\0 `);
  return h;
}

const pad = (n: number) => Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);

/** A ustar archive; names or link names over 100 bytes get a pax header. */
export function makeTar(entries: TarSpec[]): Buffer {
  const out: Buffer[] = [];
  for (const e of entries) {
    const type = e.type ?? "file";
    const data = type === "file" ? Buffer.from(e.content ?? "") : Buffer.alloc(0);
    const link = e.linkname ?? "";
    if (Buffer.byteLength(e.name) > 99 || Buffer.byteLength(link) > 99) {
      const recs = [paxRecord("path", e.name), ...(link ? [paxRecord("linkpath", link)] : [])];
      const pax = Buffer.from(recs.join(""));
      out.push(header("PaxHeader", EXTENSION_FLAGS.pax, pax.length, { name: "" }, ""), pax, pad(pax.length));
    }
    out.push(header(e.name.slice(0, 99), TYPEFLAG[type], data.length, e, link.slice(0, 99)), data, pad(data.length));
  }
  out.push(Buffer.alloc(1024));
  return Buffer.concat(out);
}

// ---------------------------------------------------------------- OCI layouts

export type Compression = "gzip" | "zstd" | "none";

export function compress(tar: Buffer, c: Compression): Buffer {
  if (c === "gzip") return gzipSync(tar);
  if (c === "zstd") {
    const r = spawnSync("zstd", ["-q", "-c", "-3"], { input: tar, maxBuffer: 1 << 30 });
    if (r.status !== 0) throw new Error(`zstd: ${r.stderr}`);
    return r.stdout;
  }
  return tar;
}

const LAYER_MT: Record<Compression, string> = {
  gzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  zstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  none: "application/vnd.oci.image.layer.v1.tar",
};

export const sha256 = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

export interface Desc {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { os: string; architecture: string; variant?: string };
  annotations?: Record<string, string>;
}

export interface ImageSpec {
  layers: Array<{ tar: Buffer; compression: Compression } | { estargz: EStargzLayer }>;
  arch?: string;
  config?: Record<string, unknown>;
}

/** Builds an OCI image layout directory: blobs, index.json, oci-layout. */
export class OciLayout {
  private readonly top: Desc[] = [];
  constructor(readonly dir: string) {
    mkdirSync(join(dir, "blobs", "sha256"), { recursive: true });
    writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  }

  blob(bytes: Buffer, mediaType: string): Desc {
    const digest = sha256(bytes);
    writeFileSync(join(this.dir, "blobs", "sha256", digest.slice(7)), bytes);
    return { mediaType, digest, size: bytes.length };
  }

  /** Writes config + layers + manifest; returns the manifest descriptor (not yet in index.json). */
  image(spec: ImageSpec): Desc {
    const arch = spec.arch ?? "amd64";
    const layers = spec.layers.map((l) =>
      "estargz" in l
        ? {
            ...this.blob(l.estargz.blob, LAYER_MT.gzip),
            annotations: { [TOC_DIGEST_ANNOTATION]: l.estargz.tocDigest },
          }
        : this.blob(compress(l.tar, l.compression), LAYER_MT[l.compression]),
    );
    const config = {
      architecture: arch,
      os: "linux",
      config: spec.config ?? {},
      rootfs: { type: "layers", diff_ids: spec.layers.map((l) => ("estargz" in l ? l.estargz.diffId : sha256(l.tar))) },
    };
    const cfg = this.blob(Buffer.from(JSON.stringify(config)), "application/vnd.oci.image.config.v1+json");
    const manifest = { schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", config: cfg, layers };
    const d = this.blob(Buffer.from(JSON.stringify(manifest)), manifest.mediaType);
    return { ...d, platform: { os: "linux", architecture: arch } };
  }

  index(manifests: Desc[]): Desc {
    const idx = { schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests };
    return this.blob(Buffer.from(JSON.stringify(idx)), idx.mediaType);
  }

  /** Names a manifest or index in index.json and writes it. */
  tag(d: Desc, tag: string): void {
    const { platform: _p, ...rest } = d;
    this.top.push({ ...rest, annotations: { "org.opencontainers.image.ref.name": tag } });
    writeFileSync(
      join(this.dir, "index.json"),
      JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: this.top }),
    );
  }
}

export async function skopeo(...args: string[]): Promise<void> {
  try {
    await run("skopeo", ["--insecure-policy", ...args], { maxBuffer: 16 << 20 });
  } catch (e) {
    throw new Error(`skopeo ${args.join(" ")}: ${(e as { stderr?: string }).stderr ?? e}`);
  }
}

/** Pushes `oci:DIR:tag` to `host/repo:tag` (all platforms of an index). */
export async function push(dir: string, tag: string, host: string, repo: string): Promise<void> {
  await skopeo(
    "copy",
    "--all",
    "--preserve-digests",
    "--dest-tls-verify=false",
    `oci:${dir}:${tag}`,
    `docker://${host}/${repo}:${tag}`,
  );
}

// ---------------------------------------------------------------- proxy

export interface Proxy {
  host: string;
  /** Requests seen, as "METHOD path" (and " range=bytes=A-B" for range requests). */
  requests: string[];
  tokensIssued: number;
  /**
   * While set, each upstream answer is read whole first and, when this says so of its body,
   * replaced by a 503 (a registry that fails to send some of its content).
   */
  refusingBody?: ((body: Buffer, request: string) => boolean) | undefined;
  close(): Promise<void>;
}

/**
 * Forwards /v2/ to `upstream`, counting requests. `auth: "bearer"` answers 401 with a Bearer
 * challenge and issues tokens at /token to clients with the right Basic credentials;
 * `auth: "basic"` wants those credentials directly.
 */
export async function startProxy(
  upstream: string,
  auth: "none" | "bearer" | "basic" = "none",
  user = "alice",
  pass = "s3cret",
): Promise<Proxy> {
  const basic = `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}`;
  const tokens = new Set<string>();
  const state = { requests: [] as string[], tokensIssued: 0 };
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const proxy: Proxy = {
    host,
    get requests() {
      return state.requests;
    },
    get tokensIssued() {
      return state.tokensIssued;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  const server: Server = createServer((req: IncomingMessage, res) => {
    const url = req.url ?? "/";
    if (url.startsWith("/token")) {
      if (req.headers.authorization !== basic) {
        res.writeHead(401).end();
        return;
      }
      const token = `tok-${++state.tokensIssued}`;
      tokens.add(token);
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token }));
      return;
    }
    const line = `${req.method} ${url}${req.headers.range ? ` range=${req.headers.range}` : ""}`;
    state.requests.push(line);
    const authz = req.headers.authorization ?? "";
    if (auth === "bearer" && !tokens.has(authz.replace(/^Bearer /, ""))) {
      const repo = /^\/v2\/(.+)\/(manifests|blobs)\//.exec(url)?.[1] ?? "";
      res
        .writeHead(401, {
          "www-authenticate": `Bearer realm="http://${host}/token",service="test-registry",scope="repository:${repo}:pull"`,
          "content-type": "application/json",
        })
        .end(JSON.stringify({ errors: [{ code: "UNAUTHORIZED", message: "authentication required" }] }));
      return;
    }
    if (auth === "basic" && authz !== basic) {
      res.writeHead(401, { "www-authenticate": `Basic realm="test"` }).end();
      return;
    }
    const [uh, up] = upstream.split(":");
    const headers = { ...req.headers, host: upstream };
    delete headers.authorization;
    const preq = httpRequest({ host: uh, port: Number(up), method: req.method, path: url, headers }, (pres) => {
      const refusing = proxy.refusingBody;
      if (!refusing) {
        res.writeHead(pres.statusCode ?? 502, pres.headers);
        pres.pipe(res);
        return;
      }
      const parts: Buffer[] = [];
      pres.on("data", (b: Buffer) => parts.push(b));
      pres.on("end", () => {
        const body = Buffer.concat(parts);
        if (refusing(body, line)) res.writeHead(503).end();
        else res.writeHead(pres.statusCode ?? 502, pres.headers).end(body);
      });
    });
    preq.on("error", () => res.writeHead(502).end());
    req.pipe(preq);
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return proxy;
}
