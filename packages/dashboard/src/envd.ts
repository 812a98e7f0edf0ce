import { ENVD_PORT, Filesystem, Process } from "@aenv/protocol";
import { type Client, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";

/**
 * A sandbox's envd, reached through the proxy of the origin that served the page: the E2B
 * routing headers name the sandbox and envd's port, X-Access-Token is the sandbox's envd
 * token (from GET /sandboxes/{id}). The API key is never sent here: sandbox traffic does
 * not need it, and the proxy would strip it anyway.
 */
export interface EnvdTarget {
  sandboxId: string;
  accessToken: string;
}

function routingHeaders(t: EnvdTarget): Record<string, string> {
  return {
    "e2b-sandbox-id": t.sandboxId,
    "e2b-sandbox-port": String(ENVD_PORT),
    "x-access-token": t.accessToken,
  };
}

export interface Envd {
  process: Client<typeof Process>;
  filesystem: Client<typeof Filesystem>;
  /** envd's plain-HTTP /files, for downloads and uploads. */
  files(method: "GET" | "POST", path: string, body?: BodyInit): Promise<Response>;
}

export function envdClient(t: EnvdTarget): Envd {
  const headers = routingHeaders(t);
  const addHeaders: Interceptor = (next) => async (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  const transport = createConnectTransport({
    baseUrl: location.origin,
    interceptors: [addHeaders],
    fetch: (input, init) => fetch(input, { ...init, credentials: "omit" }),
  });
  return {
    process: createClient(Process, transport),
    filesystem: createClient(Filesystem, transport),
    async files(method, path, body) {
      const r = await fetch(`/files?path=${encodeURIComponent(path)}`, {
        method,
        // A File body would be sent as its own type (text/plain): envd takes raw bytes only as this.
        headers: body === undefined ? headers : { ...headers, "content-type": "application/octet-stream" },
        body,
        credentials: "omit",
        cache: "no-store",
      });
      if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${(await r.text()).slice(0, 200)}`);
      return r;
    },
  };
}
