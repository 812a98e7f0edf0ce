import { type ClientRequest, request } from "node:http";
import { ENVD_PORT } from "@aenv/protocol";

/**
 * Host-to-envd calls in flight per slot address, and the addresses a checkpoint holds.
 *
 * runsc 20240729 resets every external TCP connection while it saves a sandbox
 * (--net-disconnect-ok), and the reset wakes the socket's epoll in the middle of the save:
 * the image can come back with envd's event loop deaf to its listening socket (connections
 * complete in netstack and are never accepted; the host sees "envd did not answer"). So no
 * connection of ours may be open in envd when the checkpoint starts: a capture holds the
 * address (holdEnvd), waits for calls in flight, and calls that come meanwhile fail fast
 * instead of opening one. They must not wait either: after a pause the address is another
 * sandbox's, and the call carries this one's token.
 */
const inflight = new Map<string, Set<{ req: ClientRequest; done: Promise<void> }>>();
const held = new Map<string, symbol>();

export class EnvdHeldError extends Error {
  constructor(ip: string) {
    super(`envd at ${ip} is held by a checkpoint`);
  }
}

/**
 * Holds envd's address for a checkpoint: new calls fail with EnvdHeldError, calls in flight
 * get up to drainMs to end and are then cut. Returns the release.
 */
export async function holdEnvd(ip: string, drainMs = 500): Promise<() => void> {
  const token = Symbol(ip);
  held.set(ip, token);
  const calls = [...(inflight.get(ip) ?? [])];
  if (calls.length > 0) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(calls.map((c) => c.done)),
      new Promise<void>((r) => {
        timer = setTimeout(r, drainMs);
      }),
    ]);
    clearTimeout(timer);
    for (const c of inflight.get(ip) ?? []) c.req.destroy(new EnvdHeldError(ip));
  }
  return () => {
    if (held.get(ip) === token) held.delete(ip);
  };
}

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
    /** The checkpoint's own call (/quiesce), let through its hold. */
    holder?: boolean;
  } = {},
): Promise<{ status: number; body: string }> {
  if (held.has(ip) && !opts.holder) return Promise.reject(new EnvdHeldError(ip));
  let finish = () => {};
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
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
    // In flight from here until it settles (holdEnvd waits for it, or cuts it).
    const calls = inflight.get(ip) ?? new Set();
    inflight.set(ip, calls);
    let settle = () => {};
    const call = { req, done: new Promise<void>((r) => (settle = r)) };
    calls.add(call);
    finish = () => {
      calls.delete(call);
      if (calls.size === 0 && inflight.get(ip) === calls) inflight.delete(ip);
      settle();
    };
    req.on("timeout", () => req.destroy(new Error("envd request timed out")));
    req.on("error", reject);
    req.end(payload);
  }).finally(() => finish());
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
