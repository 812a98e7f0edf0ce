import { readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, extname, join, relative } from "node:path";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

/**
 * The web dashboard (packages/dashboard), served from its built bundle: `GET /` with
 * `Accept: text/html` is the page, its files are under /dashboard/. The page and its files
 * carry no data and need no key (a browser cannot send a header on navigation); every call
 * the page makes is an ordinary API call with X-API-Key. Only the files of the bundle, read
 * once at start, are ever answered: no path from a request reaches the file system.
 */

export const DASHBOARD_PREFIX = "/dashboard/";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".json": "application/json",
};

/**
 * Scripts and connections only to this origin (the API and the sandbox proxy it fronts);
 * no framing. Inline styles stay allowed: the terminal and chart libraries position their
 * elements with them.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "object-src 'none'",
].join("; ");

interface Asset {
  body: Buffer;
  type: string;
}

/** The bundle's folder: the dashboard package's dist/, wherever npm put the package. */
export function defaultDashboardDir(): string | undefined {
  try {
    const pkg = createRequire(import.meta.url).resolve("@aenv/dashboard/package.json");
    return join(dirname(pkg), "dist");
  } catch {
    return undefined;
  }
}

function walk(dir: string, root: string, out: Map<string, Asset>): void {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, root, out);
    else out.set(relative(root, p).split("\\").join("/"), { body: readFileSync(p), type: TYPES[extname(p)] ?? "" });
  }
}

/** The bundle's files by path under the folder; empty when it was not built. */
export function loadBundle(dir: string | undefined): Map<string, Asset> {
  const files = new Map<string, Asset>();
  if (!dir) return files;
  try {
    walk(dir, dir, files);
  } catch {
    // Not built (a server built without the dashboard still serves the API).
  }
  return files;
}

function wantsHtml(req: FastifyRequest): boolean {
  const accept = req.headers.accept ?? "";
  return accept.split(",").some((part) => part.trim().split(";")[0]?.trim() === "text/html");
}

function securityHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header("content-security-policy", CSP)
    .header("x-content-type-options", "nosniff")
    .header("referrer-policy", "no-referrer")
    .header("x-frame-options", "DENY");
}

export interface DashboardOptions {
  /** The built bundle's folder (default: the installed @aenv/dashboard package's dist/). */
  dir?: string;
}

/** Registers GET / (for browsers) and GET /dashboard/* on an API or gateway instance. */
export async function dashboardRoutes(app: FastifyInstance, opts: DashboardOptions = {}): Promise<void> {
  const files = loadBundle(opts.dir ?? defaultDashboardDir());
  const index = files.get("index.html");
  // Public: the page has no data; the API calls it makes carry the key.
  const config = { public: true };
  app.get("/", { config }, async (req, reply) => {
    if (!wantsHtml(req)) return reply.status(404).send({ code: 404, message: "no route GET /" });
    if (!index) {
      return reply.status(503).send({ code: 503, message: "the dashboard was not built (npm run build)" });
    }
    return securityHeaders(reply).header("cache-control", "no-store").type(index.type).send(index.body);
  });
  app.get(`${DASHBOARD_PREFIX}*`, { config }, async (req, reply) => {
    const path = (req.params as { "*": string })["*"];
    const file = path === "index.html" ? undefined : files.get(path);
    if (!file) return reply.status(404).send({ code: 404, message: "no such dashboard file" });
    // Vite names every built file by its content hash: a name is never reused for other bytes.
    return securityHeaders(reply)
      .header("cache-control", "public, max-age=31536000, immutable")
      .type(file.type || "application/octet-stream")
      .send(file.body);
  });
}
