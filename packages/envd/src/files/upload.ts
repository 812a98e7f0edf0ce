/** POST /files — multipart/form-data (one or more `file` parts) or application/octet-stream. */
import type { IncomingMessage, ServerResponse } from "node:http";
import path from "node:path";
import { Readable } from "node:stream";
import { createGunzip, createInflate } from "node:zlib";
import busboy from "busboy";
import type { Env } from "../env.js";
import { metadataFromHeaders } from "../filesystem/metadata.js";
import { HttpError, sendJson } from "../http/respond.js";
import { resolvePath } from "../paths.js";
import type { User } from "../users.js";
import { writeFileAtomic } from "./atomic.js";
import { authorizeFiles } from "./common.js";

/** Largest `file` part accepted without a filename (such a part is buffered, not streamed). */
const TEXT_PART_LIMIT = 8 << 20;

interface Written {
  path: string;
  name: string;
  type: "file";
  metadata?: Record<string, string>;
}

/** undici escapes `"`, CR and LF in multipart filenames. */
function decodeFilename(name: string): string {
  return name.replace(/%22/g, '"').replace(/%0D/gi, "\r").replace(/%0A/gi, "\n");
}

function hasWideChar(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0xff) return true;
  return false;
}

function decompressor(encoding: string | undefined) {
  const enc = (encoding ?? "").trim().toLowerCase();
  if (enc === "" || enc === "identity") return undefined;
  if (enc === "gzip" || enc === "x-gzip") return createGunzip();
  if (enc === "deflate") return createInflate();
  throw new HttpError(400, `unsupported content encoding '${encoding}'`);
}

async function finish(env: Env, target: string, meta: Record<string, string>): Promise<Written> {
  const hasMeta = Object.keys(meta).length > 0;
  if (hasMeta) await env.metadata.set(target, meta).catch(() => {});
  return { path: target, name: path.basename(target), type: "file", ...(hasMeta ? { metadata: meta } : {}) };
}

async function uploadOctetStream(
  env: Env,
  req: IncomingMessage,
  user: User,
  query: URLSearchParams,
  meta: Record<string, string>,
): Promise<Written[]> {
  const raw = query.get("path");
  if (!raw) throw new HttpError(400, "query parameter 'path' is required for application/octet-stream uploads");
  const target = resolvePath(raw, user, env.state.defaultWorkdir);
  const enc = req.headers["content-encoding"];
  await writeFileAtomic(target, req, user, decompressor(Array.isArray(enc) ? enc[0] : enc));
  return [await finish(env, target, meta)];
}

function uploadMultipart(
  env: Env,
  req: IncomingMessage,
  user: User,
  query: URLSearchParams,
  meta: Record<string, string>,
): Promise<Written[]> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      // A `file` part without a filename (FormData.append("file", "text")) comes as a field:
      // latin1 keeps its bytes as they were sent, and it is held in memory, hence its bound.
      bb = busboy({
        headers: req.headers,
        preservePath: true,
        defCharset: "latin1",
        limits: { fieldSize: TEXT_PART_LIMIT },
      });
    } catch (err) {
      reject(new HttpError(400, `invalid multipart request: ${(err as Error).message}`));
      return;
    }
    const queryPath = query.get("path") || undefined;
    const seen = new Set<string>();
    const tasks: Promise<Written>[] = [];
    let failure: HttpError | undefined;

    const accept = (stream: Readable, filename: string | undefined): void => {
      if (failure) {
        stream.resume();
        return;
      }
      const given = queryPath ?? (filename ? decodeFilename(filename) : "");
      if (!given) {
        failure = new HttpError(400, "missing file path (part filename or query 'path')");
        stream.resume();
        return;
      }
      const target = resolvePath(given, user, env.state.defaultWorkdir);
      if (seen.has(target)) {
        failure = new HttpError(400, `duplicate path '${target}' in upload`);
        stream.resume();
        return;
      }
      seen.add(target);
      const task = writeFileAtomic(target, stream, user).then(() => finish(env, target, meta));
      task.catch((err: unknown) => {
        failure ??= err instanceof HttpError ? err : new HttpError(500, String(err));
      });
      tasks.push(task);
    };
    bb.on("file", (_field: string, stream: Readable, info: busboy.FileInfo) => accept(stream, info.filename));
    bb.on("field", (name: string, value: string, info: busboy.FieldInfo) => {
      if (name !== "file" || failure) return;
      if (info.valueTruncated) {
        failure = new HttpError(
          413,
          `a 'file' part without a filename is limited to ${TEXT_PART_LIMIT} bytes; send it with a filename`,
        );
        return;
      }
      // Decoded as latin1 unless the part named a charset; a wider character means it did.
      const bytes = Buffer.from(value, hasWideChar(value) ? "utf8" : "latin1");
      accept(Readable.from([bytes]), undefined);
    });
    bb.on("error", (err: Error) => {
      failure ??= new HttpError(400, `invalid multipart body: ${err.message}`);
      req.unpipe(bb);
      req.resume();
      Promise.allSettled(tasks).then(() => reject(failure));
    });
    bb.on("close", () => {
      Promise.allSettled(tasks).then((results) => {
        if (failure) return reject(failure);
        const out: Written[] = [];
        for (const r of results) {
          if (r.status === "rejected") return reject(r.reason);
          out.push(r.value);
        }
        if (out.length === 0) return reject(new HttpError(400, "no file parts in multipart body"));
        resolve(out);
      });
    });
    req.pipe(bb);
  });
}

export async function handleUpload(
  env: Env,
  req: IncomingMessage,
  res: ServerResponse,
  query: URLSearchParams,
): Promise<void> {
  const user = await authorizeFiles(env, req, query, "write");
  const m = metadataFromHeaders(req.headers);
  if (!m.ok) throw new HttpError(400, m.message);
  const type = (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
  let written: Written[];
  if (type === "multipart/form-data") {
    written = await uploadMultipart(env, req, user, query, m.meta);
  } else if (type === "application/octet-stream") {
    written = await uploadOctetStream(env, req, user, query, m.meta);
  } else {
    throw new HttpError(400, `unsupported content type '${type || "(none)"}'`);
  }
  sendJson(res, 200, written);
}
