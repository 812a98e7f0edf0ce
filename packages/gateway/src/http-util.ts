import type { IncomingMessage, ServerResponse } from "node:http";
import { IDEMPOTENCY } from "@aenv/protocol";
import type { FastifyReply } from "fastify";
import type { call } from "./forward.js";
import { signedForNode } from "./node-proof.js";

export type NodeAnswer = Awaited<ReturnType<typeof call>>;

/** The headers a gateway passes on when it calls a node itself (not a streamed forward). */
export function nodeHeaders(req: IncomingMessage): Record<string, string> {
  const h: Record<string, string> = {};
  for (const k of ["x-api-key", "content-type", "authorization", "user-agent", IDEMPOTENCY.header]) {
    const v = req.headers[k];
    if (typeof v === "string") h[k] = v;
  }
  return signedForNode(req, h);
}

export function readBody(req: IncomingMessage, max = 1024 * 1024): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    req.on("data", (c: Buffer) => {
      n += c.length;
      if (n > max) req.destroy(new Error("body too large"));
      else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

export function relay(res: ServerResponse, ans: NodeAnswer): void {
  const headers: Record<string, string> = { "content-length": String(ans.body.length) };
  for (const k of ["content-type", "x-next-token"]) {
    const v = ans.headers[k];
    if (typeof v === "string") headers[k] = v;
  }
  res.writeHead(ans.status, headers);
  res.end(ans.body);
}

export function relayReply(reply: FastifyReply, ans: NodeAnswer): FastifyReply {
  const ct = ans.headers["content-type"];
  if (typeof ct === "string") void reply.header("content-type", ct);
  return reply.status(ans.status).send(ans.body);
}

/** A JSON body, or undefined when it is not JSON. */
export function parseJson<T>(b: Buffer): T | undefined {
  try {
    return JSON.parse(b.toString() || "null") as T;
  } catch {
    return undefined;
  }
}
