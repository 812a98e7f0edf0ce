/**
 * A filesystem-only pause keeps one file: the sandbox's writable layer as envd streams it
 * (a tar the host never unpacks; envd applies it inside the next boot of the sandbox).
 */
import {
  closeSync,
  createReadStream,
  createWriteStream,
  existsSync,
  mkdirSync,
  openSync,
  readSync,
  rmSync,
  statSync,
} from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { ConflictError, TooLargeError } from "@aenv/edge/errors";
import { ENVD_FS_LAYER_APPLY_PATH, ENVD_FS_LAYER_CAPTURE_PATH, ENVD_PORT, type EnvdLayerStats } from "@aenv/protocol";
import { z } from "zod";
import { commitDir } from "../util/fsync.js";

const LAYER_FILE = "layer.tar";
/** A tar ends with two zero blocks: a layer without them was cut short. */
const END_BYTES = 1024;
// Generous: a big layer on a busy 2-core node.
const LAYER_TIMEOUT_MS = 10 * 60_000;

const LayerStats = z.object({ entries: z.number(), whiteouts: z.number(), bytes: z.number() });

/** Whether dir holds a whole layer (it is renamed into place only once complete). */
export function isCompleteLayer(dir: string | undefined): boolean {
  return !!dir && existsSync(join(dir, LAYER_FILE));
}

export function layerBytes(dir: string): number {
  return statSync(join(dir, LAYER_FILE)).size;
}

function endsLikeTar(file: string): boolean {
  const size = statSync(file).size;
  if (size < END_BYTES || size % 512 !== 0) return false;
  const buf = Buffer.alloc(END_BYTES);
  const fd = openSync(file, "r");
  try {
    readSync(fd, buf, 0, END_BYTES, size - END_BYTES);
  } finally {
    closeSync(fd);
  }
  return buf.every((b) => b === 0);
}

function post(ip: string, path: string, token: string, headers: Record<string, string> = {}) {
  return request({
    host: ip,
    port: ENVD_PORT,
    method: "POST",
    path,
    headers: { "x-access-token": token, ...headers },
    agent: false,
    timeout: LAYER_TIMEOUT_MS,
  });
}

function capped(maxBytes: number): Transform {
  let n = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      n += chunk.length;
      if (n > maxBytes) done(new TooLargeError(`the filesystem layer is over ${maxBytes} bytes`));
      else done(null, chunk);
    },
  });
}

async function errorText(res: AsyncIterable<Buffer>): Promise<string> {
  let s = "";
  for await (const c of res) if (s.length < 2000) s += c.toString();
  return s;
}

/**
 * Streams the layer out of envd into `final` (a folder), durably; returns its size in bytes.
 * What answers is inside the sandbox (root there can replace envd): a stream over maxBytes
 * is cut off, so a sandbox cannot fill the host's disk.
 */
export async function captureLayer(ip: string, token: string, final: string, maxBytes: number): Promise<number> {
  const tmp = `${final}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const file = join(tmp, LAYER_FILE);
  try {
    await new Promise<void>((resolve, reject) => {
      const req = post(ip, ENVD_FS_LAYER_CAPTURE_PATH, token);
      req.on("timeout", () => req.destroy(new Error("envd layer capture timed out")));
      req.on("error", reject);
      req.on("response", (res) => {
        if (res.statusCode === 404) {
          res.resume();
          // Started (or restored) with an envd from before layers: only a memory pause works.
          reject(new ConflictError("this sandbox's envd cannot take a filesystem layer; pause it with its memory"));
          return;
        }
        if (res.statusCode !== 200) {
          errorText(res).then((t) => reject(new Error(`envd layer capture answered ${res.statusCode}: ${t}`)), reject);
          return;
        }
        // A cut stream (envd failed mid-walk) rejects here: res errors with "aborted".
        pipeline(res, capped(maxBytes), createWriteStream(file)).then(resolve, reject);
      });
      req.end();
    });
    if (!endsLikeTar(file)) throw new Error("envd's layer stream was cut short");
    commitDir(tmp, final);
    return layerBytes(final);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Sends a kept layer to envd, which applies it to the sandbox's /. */
export async function applyLayer(ip: string, token: string, dir: string): Promise<EnvdLayerStats> {
  const file = join(dir, LAYER_FILE);
  return new Promise<EnvdLayerStats>((resolve, reject) => {
    const req = post(ip, ENVD_FS_LAYER_APPLY_PATH, token, {
      "content-type": "application/x-tar",
      "content-length": String(statSync(file).size),
    });
    req.on("timeout", () => req.destroy(new Error("envd layer apply timed out")));
    req.on("error", reject);
    req.on("response", (res) => {
      errorText(res).then((t) => {
        if (res.statusCode !== 200) return reject(new Error(`envd layer apply answered ${res.statusCode}: ${t}`));
        try {
          resolve(LayerStats.parse(JSON.parse(t)));
        } catch (err) {
          reject(err);
        }
      }, reject);
    });
    pipeline(createReadStream(file), req).catch(reject);
  });
}
