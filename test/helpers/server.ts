import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { after, before } from "node:test";
import { TEST_REPOSITORY_KEY } from "./repository.js";

export const ROOT = resolve(import.meta.dirname, "..", "..");
export const TEMPLATES_DIR = process.env.AENV_TEST_TEMPLATES_DIR ?? "/var/lib/aenv/templates";

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => res(port));
    });
    s.on("error", rej);
  });
}

export interface TestServer {
  url: string;
  port: number;
  apiKey: string;
  dataDir: string;
  domain: string;
  proc: ChildProcess;
  logs: () => string;
  /** Graceful stop (SIGTERM). */
  stop(): Promise<void>;
  /** SIGKILL, leaving sandboxes behind as a crash would. */
  crash(): Promise<void>;
  /** Same data dir, same port, new process. */
  restart(): Promise<TestServer>;
  api(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: unknown; headers: Headers }>;
}

export interface StartOptions {
  dataDir?: string;
  templatesDir?: string;
  port?: number;
  env?: Record<string, string>;
  /**
   * A host of its own (helpers/hosts.ts): the server runs in that network namespace and
   * listens on its address instead of loopback.
   */
  host?: { address: string; wrap: string[] };
}

/**
 * Test servers' data folders, and the file in each naming the test file that made it
 * (scripts/test-e2e.mjs, plain JavaScript, reads both by these names).
 */
const DATA_DIR_PREFIX = "/var/tmp/aenv-test-";
const OWNER_FILE = ".test-owner";

/** Starts the real aenv-server binary as a child process, on loopback, with its own netns prefix. */
export async function startServer(opts: StartOptions = {}): Promise<TestServer> {
  // A port picked here may be taken again before the server binds it (its egress proxy listens
  // on ephemeral ports first): a server that lost its port that way is started on another.
  for (let attempt = 0; ; attempt++) {
    // A fresh data folder per attempt; one whose server never came up goes with it.
    const dataDir = opts.dataDir ?? mkdtempSync(DATA_DIR_PREFIX);
    // Which test file made it: the suite's runner names the owners of folders left behind.
    if (opts.dataDir === undefined) writeFileSync(join(dataDir, OWNER_FILE), process.argv[1] ?? "");
    try {
      return await startServerOnce({ ...opts, dataDir });
    } catch (err) {
      if (opts.dataDir === undefined) rmSync(dataDir, { recursive: true, force: true });
      if (opts.port !== undefined || attempt >= 3 || !/EADDRINUSE/.test((err as Error).message)) throw err;
    }
  }
}

/**
 * The envd runtime folder (DATA/runtime: node and envd, ~120 MB) of the last server started,
 * hard-linked into each new data folder: a fresh server then skips copying and hashing it
 * (~1.2 s a start). The first server of a run builds it as a user's would; a server whose
 * inputs changed (a rebuild) builds its own and it becomes the one kept.
 */
const RUNTIME_CACHE = "/var/tmp/aenv-testcache-runtime";

function seedRuntime(dataDir: string): void {
  const dest = join(dataDir, "runtime");
  if (existsSync(dest) || memos(RUNTIME_CACHE).trim() === "") return;
  // Seeding is an optimisation: a failure leaves the server to build its own.
  spawnSync("cp", ["-al", RUNTIME_CACHE, dest]);
}

/** The folder's memos of built runtimes (one per envd kind), "" when it has none. */
function memos(dir: string): string {
  return [".ids.json", ".ids-native.json"]
    .map((f) => {
      try {
        return readFileSync(join(dir, f), "utf8");
      } catch {
        return "";
      }
    })
    .join("\n");
}

function keepRuntime(dataDir: string): void {
  const src = join(dataDir, "runtime");
  const m = memos(src);
  if (m.trim() === "" || m === memos(RUNTIME_CACHE)) return;
  // Servers of two lanes may start at once after a rebuild, each keeping its copy: every step
  // is a rename of a folder of this process's own, and a lost race only leaves the other
  // process's copy in place (an optimisation, never a reason to fail a start).
  const tag = `${process.pid}-${Math.random().toString(36).slice(2)}`;
  const tmp = `${RUNTIME_CACHE}.tmp-${tag}`;
  const old = `${RUNTIME_CACHE}.old-${tag}`;
  try {
    if (spawnSync("cp", ["-al", src, tmp]).status !== 0) return;
    try {
      renameSync(RUNTIME_CACHE, old);
    } catch {
      // none kept yet, or another process moved it first
    }
    renameSync(tmp, RUNTIME_CACHE);
  } catch {
    // another process put its copy there first
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(old, { recursive: true, force: true });
  }
}

/** The network prefixes of this process's servers still running. */
const liveNets = new Set<string>();

/**
 * The network a test server gets: the caller's, else the file's default (AENV_TEST_NET_PREFIX /
 * AENV_TEST_SLOT_CIDR, to run beside another file) for the first server at a time and one of
 * its own for each server started beside it (a server refuses a prefix or range another
 * running server holds).
 */
function networkFor(env: Record<string, string> | undefined): { AENV_NET_PREFIX: string; AENV_SLOT_CIDR: string } {
  if (env?.AENV_NET_PREFIX && env.AENV_SLOT_CIDR)
    return { AENV_NET_PREFIX: env.AENV_NET_PREFIX, AENV_SLOT_CIDR: env.AENV_SLOT_CIDR };
  const prefix = process.env.AENV_TEST_NET_PREFIX ?? "aet";
  const [a, b] = (process.env.AENV_TEST_SLOT_CIDR ?? "10.202.0.0/16").split(".").map(Number) as [number, number];
  for (let k = 0; k < 8; k++) {
    const net = {
      AENV_NET_PREFIX: k === 0 ? prefix : `${prefix.slice(0, 3)}${"ijklmnop"[k - 1]}`,
      AENV_SLOT_CIDR: `${a}.${b - k}.0.0/16`,
    };
    if (!liveNets.has(net.AENV_NET_PREFIX)) return net;
  }
  throw new Error("more than 8 test servers at once in one process");
}

async function startServerOnce(opts: StartOptions & { dataDir: string }): Promise<TestServer> {
  const dataDir = opts.dataDir;
  const net = networkFor(opts.env);
  seedRuntime(dataDir);
  const port = opts.port ?? (await freePort());
  const apiKey = "e2b_0123456789abcdef0123456789abcdef01234567";
  const domain = `sbx.localhost:${port}`;
  const listenHost = opts.host?.address ?? "127.0.0.1";
  const wrap = opts.host?.wrap ?? [];
  const proc = spawn(
    wrap[0] ?? process.execPath,
    [
      ...(wrap.length > 0 ? [...wrap.slice(1), process.execPath] : []),
      ...cpuProfileArgs(),
      join(ROOT, "packages/server/bin/aenv-server.js"),
      "--listen",
      `${listenHost}:${port}`,
      "--data-dir",
      dataDir,
      "--templates-dir",
      opts.templatesDir ?? TEMPLATES_DIR,
      "--domain",
      domain,
    ],
    {
      env: {
        ...process.env,
        AENV_API_KEY: apiKey,
        // One key for every test server: those sharing a repository must agree on it.
        AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY,
        ...net,
        AENV_LOG_LEVEL: process.env.AENV_LOG_LEVEL ?? "info",
        AENV_WARM_SLOTS: "2",
        ...opts.env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  liveNets.add(net.AENV_NET_PREFIX);
  proc.once("exit", () => liveNets.delete(net.AENV_NET_PREFIX));
  let out = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const url = `http://${listenHost}:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`aenv-server exited ${proc.exitCode}:\n${out}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 204) break;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      // Nobody gets a handle to stop it: left running, it would hold its netns prefix and slots.
      proc.kill("SIGKILL");
      throw new Error(`aenv-server did not become ready within 60 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  keepRuntime(dataDir);
  const exited = () =>
    new Promise<void>((r) => (proc.exitCode !== null || proc.signalCode !== null ? r() : proc.once("exit", () => r())));
  const server: TestServer = {
    url,
    port,
    apiKey,
    dataDir,
    domain,
    proc,
    logs: () => out,
    async stop() {
      proc.kill("SIGTERM");
      await exited();
    },
    async crash() {
      proc.kill("SIGKILL");
      await exited();
    },
    // The same network: the sandboxes it left running are in that prefix's namespaces.
    restart: () => startServer({ ...opts, env: { ...opts.env, ...net }, dataDir, port }),
    async api(method, path, body, headers = {}) {
      const r = await fetch(`${url}${path}`, {
        method,
        headers: {
          "x-api-key": apiKey,
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...headers,
        },
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      });
      const text = await r.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // keep text
      }
      return { status: r.status, body: parsed, headers: r.headers };
    },
  };
  return server;
}

/** Points the e2b SDK at a test server (process-wide, as a user would with env vars). */
/** SDK options that point one call at this server (where useE2b points them all). */
export function sdkOptions(s: TestServer): { apiUrl: string; sandboxUrl: string; apiKey: string } {
  return { apiUrl: s.url, sandboxUrl: s.url, apiKey: s.apiKey };
}

export function useE2b(s: TestServer): void {
  process.env.E2B_API_URL = s.url;
  process.env.E2B_SANDBOX_URL = s.url;
  process.env.E2B_API_KEY = s.apiKey;
  delete process.env.E2B_DOMAIN;
}

export function cleanupDataDir(s: TestServer): void {
  rmSync(s.dataDir, { recursive: true, force: true });
}

/** GET through the Host-routed proxy, as a browser would fetch `sandbox.getHost(port)`. */
export function getViaHost(server: TestServer, host: string, path = "/"): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port: server.port, path, headers: { host }, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      // A response cut short never ends: fail instead of waiting forever.
      res.on("error", reject);
      res.on("close", () => {
        if (!res.complete) reject(new Error(`response from ${host}${path} was cut short after ${body.length} bytes`));
      });
    });
    req.setTimeout(30_000, () => req.destroy(new Error(`no answer from ${host}${path} within 30 s`)));
    req.on("error", reject);
    req.end();
  });
}

/** One server for a whole test file, with the e2b SDK pointed at it. */
export function serverForFile(opts: StartOptions = {}): () => TestServer {
  let server: TestServer | undefined;
  before(async () => {
    server = await startServer(opts);
    useE2b(server);
  });
  after(async () => {
    await server?.stop();
    if (server) cleanupDataDir(server);
  });
  return () => {
    if (!server) throw new Error("test server not started");
    return server;
  };
}

/** Snapshots are committed to the repository in the background: waits until this one is. */
export async function untilCommitted(server: TestServer, id: string): Promise<{ uploadedBytes: number }> {
  for (let i = 0; i < 600; i++) {
    const r = await server.api("GET", `/snapshots/${id}`);
    const b = r.body as { committed?: boolean; uploadedBytes: number };
    if (b.committed) return b;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`snapshot ${id} was not committed to the repository`);
}

/** Polls a condition on the host every 100 ms until it holds; throws after `ms`. */
export async function waitFor(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Sweeps of a kind the server has finished, from its /metrics. */
export async function sweepsOf(url: string, kind: "hibernation" | "retention"): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^aenv_sweeps_total\\{kind="${kind}"\\} (\\d+)`, "m").exec(text);
  if (!m) throw new Error(`no aenv_sweeps_total{kind="${kind}"} in the server's /metrics`);
  return Number(m[1]);
}

/**
 * Waits until `n` more sweeps of a kind have finished, calling `each` (an assertion) before
 * every look: a test that something did not happen waits for the sweeps that had the chance
 * to do it, not for a fixed time.
 */
export async function afterSweeps(
  url: string,
  kind: "hibernation" | "retention",
  n: number,
  each: () => void = () => {},
  timeoutMs = 120_000,
): Promise<void> {
  const target = (await sweepsOf(url, kind)) + n;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    each();
    if ((await sweepsOf(url, kind)) >= target) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${n} ${kind} sweeps`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The last log line of the server that contains every one of `parts`, waiting for it: the
 * server's stdout reaches the test through a pipe, which may deliver after the HTTP answer of
 * the operation that logged it.
 */
export async function untilLogLine(server: TestServer, parts: string[], timeoutMs = 5000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = server
      .logs()
      .split("\n")
      .filter((l) => parts.every((p) => l.includes(p)))
      .at(-1);
    if (line) return line;
    if (Date.now() > deadline) throw new Error(`no server log line with ${JSON.stringify(parts)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

/**
 * `AENV_CHILD_CPU_PROF=<dir>`: servers and gateways the helpers start write a V8 CPU profile
 * there when they exit (Node refuses `--cpu-prof` in NODE_OPTIONS, so it is passed as a flag).
 */
export function cpuProfileArgs(): string[] {
  const dir = process.env.AENV_CHILD_CPU_PROF;
  return dir ? ["--cpu-prof", `--cpu-prof-dir=${dir}`] : [];
}
