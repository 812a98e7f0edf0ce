import { request } from "node:http";
import { ENVD_PORT } from "@aenv/protocol";

/** Host-side calls to envd over the sandbox's slot address (the proxy's path, no keep-alive). */
export function envdRequest(
  ip: string,
  method: string,
  path: string,
  opts: {
    body?: unknown;
    bytes?: string;
    token?: string;
    timeoutMs?: number;
    /** Also wait (at most this long) for envd to close the connection after its answer. */
    closedWithinMs?: number;
  } = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = opts.bytes ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
    const headers: Record<string, string> = {};
    if (opts.bytes !== undefined) headers["content-type"] = "application/octet-stream";
    else if (payload !== undefined) headers["content-type"] = "application/json";
    if (opts.token) headers["x-access-token"] = opts.token;
    const req = request(
      { host: ip, port: ENVD_PORT, method, path, headers, agent: false, timeout: opts.timeoutMs ?? 5000 },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (body += d));
        res.on("end", () => {
          const done = () => resolve({ status: res.statusCode ?? 0, body });
          const sock = res.socket;
          if (!opts.closedWithinMs || !sock || sock.destroyed) return done();
          const t = setTimeout(done, opts.closedWithinMs);
          sock.once("close", () => {
            clearTimeout(t);
            done();
          });
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("envd request timed out")));
    req.on("error", reject);
    req.end(payload);
  });
}

/** Polls envd's /health until it answers 204 or the deadline passes. */
export async function waitForEnvd(ip: string, timeoutMs: number, isAlive: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let polls = 0;
  let lastErr = "";
  while (Date.now() < deadline) {
    try {
      const r = await envdRequest(ip, "GET", "/health", { timeoutMs: 3000 });
      if (r.status === 204 || r.status === 200) return;
      lastErr = `status ${r.status}`;
    } catch (err) {
      lastErr = (err as Error).message;
    }
    polls++;
    if (polls % 50 === 0 && !(await isAlive())) throw new Error("sandbox exited before envd answered");
    await new Promise((r) => setTimeout(r, polls < 100 ? 10 : 50));
  }
  throw new Error(`envd did not answer within ${timeoutMs} ms (${lastErr})`);
}
