/**
 * envd's /files through the server's proxy with node:http and nothing else: the same route,
 * headers and multipart body the e2b SDK sends, without its fetch (undici, web streams,
 * FormData). The bench reports both, so the server's own path and the SDK client's cost on
 * the same cores read apart.
 */
import { randomBytes } from "node:crypto";
import { request } from "node:http";
import { ENVD_PORT } from "@aenv/protocol";
import type { Sandbox } from "e2b";
import { mbps, timeMs } from "./stats.js";

export interface ProxyFilesTarget {
  /** The server's URL (E2B_SANDBOX_URL). */
  url: string;
  sandboxId: string;
  envdAccessToken: string;
}

function call(t: ProxyFilesTarget, method: string, path: string, body?: Buffer[], type?: string): Promise<Buffer> {
  const u = new URL(t.url);
  const headers: Record<string, string | number> = {
    "e2b-sandbox-id": t.sandboxId,
    "e2b-sandbox-port": ENVD_PORT,
    "x-access-token": t.envdAccessToken,
  };
  if (body) {
    headers["content-type"] = type ?? "application/octet-stream";
    headers["content-length"] = body.reduce((n, b) => n + b.length, 0);
  }
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, method, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (d: Buffer) => chunks.push(d));
      res.on("error", reject);
      res.on("end", () => {
        const data = Buffer.concat(chunks);
        if ((res.statusCode ?? 0) >= 300) reject(new Error(`${method} /files: ${res.statusCode} ${data.toString()}`));
        else resolve(data);
      });
    });
    req.on("error", reject);
    for (const b of body ?? []) req.write(b);
    req.end();
  });
}

const query = (path: string) => `/files?${new URLSearchParams({ path, username: "user" })}`;

/** Writes `data` to `path` as one multipart part, as the SDK's files.write does. */
async function writeViaProxy(t: ProxyFilesTarget, path: string, data: Buffer): Promise<void> {
  const boundary = `aenvbench${randomBytes(8).toString("hex")}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${path}"\r\n` +
      "Content-Type: application/octet-stream\r\n\r\n",
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  await call(t, "POST", query(path), [head, data, tail], `multipart/form-data; boundary=${boundary}`);
}

function readViaProxy(t: ProxyFilesTarget, path: string): Promise<Buffer> {
  return call(t, "GET", query(path));
}

/**
 * `reps` writes and reads of a fresh payload each through the proxy of the e2b SDK's server
 * (E2B_SANDBOX_URL), in MB/s; every read is checked against what was written.
 */
export async function transfersViaProxy(
  sbx: Sandbox,
  reps: number,
  payload: () => Buffer,
): Promise<{ writeMBps: number[]; readMBps: number[] }> {
  const token = (sbx as unknown as { envdAccessToken?: string }).envdAccessToken;
  if (!token) throw new Error("the SDK's sandbox has no envdAccessToken");
  const target = { url: process.env.E2B_SANDBOX_URL ?? "", sandboxId: sbx.sandboxId, envdAccessToken: token };
  const writeMBps: number[] = [];
  const readMBps: number[] = [];
  for (let i = 0; i < reps; i++) {
    const buf = payload();
    const path = `/tmp/bench-http-${i}.bin`;
    writeMBps.push(mbps(buf.length, (await timeMs(() => writeViaProxy(target, path, buf))).ms));
    const { ms, value } = await timeMs(() => readViaProxy(target, path));
    readMBps.push(mbps(buf.length, ms));
    if (!buf.equals(value)) throw new Error(`aenv (node:http): read back ${value.byteLength} bytes that differ`);
    await sbx.commands.run(`rm -f ${path}`);
  }
  return { writeMBps, readMBps };
}
