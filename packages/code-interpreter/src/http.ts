import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import {
  CreateContextRequest,
  codeInterpreterPath,
  type ExecuteLine,
  ExecuteRequest,
} from "@aenv/protocol/code-interpreter";
import type { z } from "zod";
import { checkAccess } from "./access.js";
import { type Contexts, parseLanguage, RequestError } from "./contexts.js";
import { Identity, sandboxEnv } from "./identity.js";
import type { Kernel } from "./kernels/kernel.js";

/** Bodies are code and variables: 32 MiB is far above any cell and bounds what one request holds. */
const MAX_BODY = 32 << 20;
/** Output one cell may stream; the rest is dropped with a note (a cell printing gigabytes). */
const MAX_OUTPUT = 16 << 20;
const KEEPALIVE_MS = 5000;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new RequestError(400, `body over ${MAX_BODY} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

async function parse<T extends z.ZodType>(req: IncomingMessage, schema: T): Promise<z.infer<T>> {
  const text = await readBody(req);
  let json: unknown;
  try {
    json = text.trim() === "" ? {} : JSON.parse(text);
  } catch {
    throw new RequestError(400, "body must be JSON");
  }
  const r = schema.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new RequestError(400, `invalid body: ${i?.path.join(".") || "body"}: ${i?.message ?? "invalid"}`);
  }
  return r.data;
}

/** An error as envd answers it (`{code, message}`), which the SDKs and E2B's clients read. */
function sendError(res: ServerResponse, status: number, message: string): void {
  send(res, status, { code: status, message });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, { "content-type": typeof body === "string" ? "text/plain" : "application/json" });
  res.end(text);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The HTTP API of @e2b/code-interpreter, on port 49999. */
export function apiServer(contexts: Contexts, ready: () => boolean, log: (m: string) => void): Server {
  const identity = new Identity();
  let renewing: Promise<void> = Promise.resolve();

  async function execute(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const b = await parse(req, ExecuteRequest);
    if (b.context_id && b.language) throw new RequestError(400, "only one of context_id or language can be provided");
    const token = header(req, "x-access-token");
    if (identity.changed(token)) {
      renewing = sandboxEnv(token).then((env) => contexts.renew(env));
    }
    await renewing;
    const kernel: Kernel = b.context_id
      ? contexts.get(b.context_id)
      : await contexts.defaultFor(parseLanguage(b.language));
    const abort = new AbortController();
    // The client gone (its timeout, a cancelled request): the cell is interrupted.
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
    // Counted in characters of stream text: results (figures) are never cut.
    let written = 0;
    const write = (line: ExecuteLine) => {
      if (res.destroyed) return;
      let out = line;
      if (out.type === "stdout" || out.type === "stderr") {
        const left = MAX_OUTPUT - written;
        if (left <= 0) return;
        if (out.text.length > left) {
          out = { ...out, text: out.text.slice(0, left) };
          write({
            type: "stderr",
            text: `[output over ${MAX_OUTPUT >> 20} MiB: the rest was dropped]\n`,
            timestamp: out.timestamp,
          });
        }
        written += out.text.length;
      }
      res.write(`${JSON.stringify(out)}\n`);
    };
    const keepalive = setInterval(() => write({ type: "keepalive" }), KEEPALIVE_MS);
    try {
      await kernel.execute(b.code, b.env_vars ?? {}, write, abort.signal);
    } catch (err) {
      write({ type: "error", name: "ServiceError", value: (err as Error).message, traceback: "" });
    } finally {
      clearInterval(keepalive);
    }
    write({ type: "end_of_execution" });
    res.end();
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = codeInterpreterPath(req.url ?? "/");
    const m = /^\/contexts\/([^/]+)(\/restart)?$/.exec(path);
    if (path === "/health") {
      if (!ready()) return send(res, 503, "starting");
      return send(res, 200, "OK");
    }
    // Every route but /health runs code or changes the kernels: the caller must hold this
    // sandbox's envd access token, checked by envd itself, before anything is read or run.
    const denied = await checkAccess(header(req, "x-access-token"));
    if (denied) {
      req.resume();
      return sendError(res, denied.status, denied.message);
    }
    if (!ready()) return send(res, 503, "code interpreter is starting");
    if (path === "/execute" && req.method === "POST") return execute(req, res);
    if (path === "/contexts" && req.method === "POST") {
      const b = await parse(req, CreateContextRequest);
      return send(res, 200, await contexts.create(parseLanguage(b.language), b.cwd));
    }
    if (path === "/contexts" && req.method === "GET") return send(res, 200, contexts.list());
    if (m?.[1] && !m[2] && req.method === "DELETE") {
      await contexts.remove(decodeURIComponent(m[1]));
      res.writeHead(204).end();
      return;
    }
    if (m?.[1] && m[2] && req.method === "POST") {
      await contexts.restart(decodeURIComponent(m[1]));
      res.writeHead(204).end();
      return;
    }
    send(res, 404, `no route ${req.method} ${path}`);
  }

  return createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      const status = err instanceof RequestError ? err.status : 500;
      if (status === 500) log(`${req.method} ${req.url}: ${(err as Error).stack ?? String(err)}`);
      if (res.headersSent) res.end();
      else send(res, status, (err as Error).message);
    });
  });
}
