// A real cluster for tests and benchmarks: redis-server on a free port, aenv-server nodes with
// their own data dirs, templates dirs (at other paths, as on separate hosts), namespace
// prefixes and slot ranges over one shared repository, and aenv-gateway processes.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import { detachMountsUnder } from "../../packages/server/src/util/mounts.js";
import type { Host, Hosts } from "./hosts.js";
import { TEST_REPOSITORY_KEY } from "./repository.js";
import { MASTER_NAME, SentinelGroup } from "./sentinel.js";
import {
  cleanupDataDir,
  cpuProfileArgs,
  freePort,
  ROOT,
  startServer,
  TEMPLATES_DIR,
  type TestServer,
} from "./server.js";

export const API_KEY = "e2b_0123456789abcdef0123456789abcdef01234567";

export interface Gateway {
  url: string;
  proc: ChildProcess;
  logs: () => string;
}

export const alive = (s: TestServer) => s.proc.exitCode === null && s.proc.signalCode === null;
export const via = (url: string) => ({ apiUrl: url, sandboxUrl: url, apiKey: API_KEY });

/** redis-server on a port, on loopback or (`host`) on a host's address in its namespace. */
export async function startRedis(port: number, host?: Host): Promise<ChildProcess> {
  const addr = host?.address ?? "127.0.0.1";
  const args = ["--port", String(port), "--bind", addr, "--save", "", "--appendonly", "no"];
  // Reached from other hosts' addresses, not loopback only.
  if (host) args.push("--protected-mode", "no");
  const wrap = host?.wrap ?? [];
  const p = spawn(
    wrap[0] ?? "redis-server",
    [...wrap.slice(1), ...(wrap.length > 0 ? ["redis-server"] : []), ...args],
    {
      stdio: "ignore",
    },
  );
  const c = new Redis(port, addr, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on("error", () => {});
  try {
    for (let i = 0; i < 100; i++) {
      if (
        await c.connect().then(
          () => true,
          () => false,
        )
      ) {
        if ((await c.ping().catch(() => "")) === "PONG") return p;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    c.disconnect();
  }
  p.kill("SIGKILL");
  throw new Error("redis-server did not start");
}

/** Nodes, gateways and Redis of one cluster; `close()` removes everything it started. */
export class TestCluster {
  readonly nodes = new Map<string, TestServer>();
  readonly gateways: Gateway[] = [];
  /** Each node's namespace prefix and slot range: a server cleans up only its own. */
  /**
   * Every node started, in order: close() cleans up each one's data folder, also of a node a
   * test dropped from `nodes` or whose ID a later node took. Sim nodes leave no sandboxes or
   * namespaces behind; the others are cleaned up with their own network (`net`).
   */
  private readonly started: Array<{ id: string; s: TestServer; sim: boolean; net: Record<string, string> }> = [];
  private slot = 0;
  private readonly templateDirs: string[] = [];
  /** Each node's own templates dir (its image store is `<dir>/.images`). */
  readonly templatesDirOf = new Map<string, string>();
  redis!: ChildProcess;
  redisUrl = "";
  /** With `start({ sentinel: true })`: the primary, replica and sentinels the cluster uses. */
  sentinel?: SentinelGroup;
  repo = "";
  /** How nodes (environment) and gateways (flags) reach the cluster's Redis. */
  private redisEnv: Record<string, string> = {};
  private gatewayRedisArgs: string[] = [];

  /** With `start({ hosts })`: Redis, and nodes and gateways started with a host, each on a host of its own. */
  hosts?: Hosts;
  private redisHost?: Host;
  readonly hostOf = new Map<string, Host>();

  constructor(private readonly prefix = "aec") {}

  /**
   * One redis-server at a URL, or (`sentinel`) a primary and replica behind three sentinels.
   * With `hosts`, Redis runs on a host of its own ("redis") and nodes and gateways may too.
   */
  async start(opts: { sentinel?: boolean; hosts?: Hosts } = {}): Promise<void> {
    if (opts.hosts) {
      this.hosts = opts.hosts;
      this.redisHost = opts.hosts.add("redis");
      const port = await freePort();
      this.redisUrl = `redis://${this.redisHost.address}:${port}`;
      this.redis = await startRedis(port, this.redisHost);
      this.redisEnv = { AENV_CLUSTER: this.redisUrl };
      this.gatewayRedisArgs = ["--cluster", this.redisUrl];
    } else if (opts.sentinel) {
      this.sentinel = new SentinelGroup();
      await this.sentinel.start();
      this.redisEnv = { AENV_CLUSTER_SENTINELS: this.sentinel.sentinels, AENV_CLUSTER_MASTER: MASTER_NAME };
      this.gatewayRedisArgs = ["--cluster-sentinels", this.sentinel.sentinels, "--cluster-master", MASTER_NAME];
    } else {
      const port = await freePort();
      this.redisUrl = `redis://127.0.0.1:${port}`;
      this.redis = await startRedis(port);
      this.redisEnv = { AENV_CLUSTER: this.redisUrl };
      this.gatewayRedisArgs = ["--cluster", this.redisUrl];
    }
    this.repo = mkdtempSync("/var/tmp/aenv-cluster-repo-");
  }

  async restartRedis(): Promise<void> {
    const port = Number(new URL(this.redisUrl).port);
    this.redis.kill("SIGKILL");
    await new Promise((r) => this.redis.once("exit", r));
    this.redis = await startRedis(port, this.redisHost);
  }

  /**
   * A node of its own: data dir, templates dir, network. `emptyTemplates` starts it with no
   * template at all (a host that joins the cluster empty: it fetches what it needs from the
   * repository); otherwise its templates dir holds the `base` test template (hard links of
   * the shared one, at a path of its own). `sim` runs it on the simulated runtime
   * (runtime/sim/) with loopback slots 127.`sim.slotOctet`.0.0/16, its operations
   * `sim.latencyScale` times as long as on runsc. `host` (with `start({ hosts })`) runs it
   * on a host of its own, named after the node.
   */
  async startNode(
    id: string,
    extraEnv: Record<string, string> = {},
    opts: { emptyTemplates?: boolean; sim?: { slotOctet: number; latencyScale?: number }; host?: boolean } = {},
  ): Promise<TestServer> {
    const n = this.slot++;
    const templatesDir = mkdtempSync(`/var/tmp/aenv-cluster-templates-${id}-`);
    this.templateDirs.push(templatesDir);
    this.templatesDirOf.set(id, templatesDir);
    if (!opts.emptyTemplates) {
      // base only (its warm images, blobs and uploads each node makes itself): a node commits
      // the templates it joins with to the repository, and the others are gigabytes.
      const r = spawnSync("cp", ["-al", join(TEMPLATES_DIR, "base"), join(templatesDir, "base")]);
      if (r.status !== 0) throw new Error(`copying template base: ${r.stderr}`);
    }
    // extraEnv may name the node's network itself (the cleanup in close() uses it too).
    const net = opts.sim
      ? { AENV_NET_PREFIX: this.prefix.slice(0, 4), AENV_SLOT_CIDR: `127.${opts.sim.slotOctet}.0.0/16` }
      : {
          AENV_NET_PREFIX: extraEnv.AENV_NET_PREFIX ?? `${this.prefix}${"abcdefgh"[n]}`,
          AENV_SLOT_CIDR: extraEnv.AENV_SLOT_CIDR ?? `10.${210 + n}.0.0/16`,
        };
    const sim: Record<string, string> = opts.sim
      ? { AENV_RUNTIME_DRIVER: "sim", AENV_SIM_LATENCY_SCALE: String(opts.sim.latencyScale ?? 1) }
      : {};
    const host = opts.host ? this.newHost(id) : undefined;
    const s = await startServer({
      templatesDir,
      ...(host ? { host } : {}),
      env: {
        ...this.redisEnv,
        AENV_NODE_ID: id,
        AENV_REPOSITORY_PATH: this.repo,
        // Every node signs and checks the shared repository's entries with the same key.
        AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY,
        AENV_GC_INTERVAL: "0",
        ...net,
        ...sim,
        ...extraEnv,
      },
    });
    this.nodes.set(id, s);
    this.started.push({ id, s, sim: !!opts.sim, net });
    return s;
  }

  private newHost(name: string): Host {
    if (!this.hosts) throw new Error("a host needs start({ hosts })");
    const h = this.hosts.add(name);
    this.hostOf.set(name, h);
    return h;
  }

  /** A gateway; `host` names a host of its own to run it on (with `start({ hosts })`). */
  /**
   * `redisPort`: reach the cluster's Redis at this loopback port instead (a relay the test can
   * cut); `env`: the gateway's own settings.
   */
  async startGateway(opts: { host?: string; redisPort?: number; env?: Record<string, string> } = {}): Promise<string> {
    const port = await freePort();
    const host = opts.host ? this.newHost(opts.host) : undefined;
    const addr = host?.address ?? "127.0.0.1";
    const wrap = host?.wrap ?? [];
    const proc = spawn(
      wrap[0] ?? process.execPath,
      [
        ...(wrap.length > 0 ? [...wrap.slice(1), process.execPath] : []),
        ...cpuProfileArgs(),
        join(ROOT, "packages/gateway/bin/aenv-gateway.js"),
        "--listen",
        `${addr}:${port}`,
        ...(opts.redisPort ? ["--cluster", `redis://127.0.0.1:${opts.redisPort}`] : this.gatewayRedisArgs),
      ],
      {
        env: { ...process.env, AENV_API_KEY: API_KEY, AENV_LOG_LEVEL: "info", ...opts.env },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    proc.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    const url = `http://${addr}:${port}`;
    for (let i = 0; i < 100; i++) {
      const r = await fetch(`${url}/health`).catch(() => undefined);
      if (r?.status === 204) {
        this.gateways.push({ url, proc, logs: () => out });
        return url;
      }
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error(`gateway did not start:\n${out}`);
  }

  /** A client of the cluster's Redis (through the sentinels when it has them), for the tests' own reads. */
  private client(): Redis {
    return this.sentinel ? this.sentinel.client() : new Redis(this.redisUrl, { maxRetriesPerRequest: 5 });
  }

  /** Which node owns a sandbox, as the cluster's Redis says ("" for none). */
  async ownerOf(id: string): Promise<string> {
    const c = this.client();
    try {
      return (await c.get(`aenv:sbx:${id}`)) ?? "";
    } finally {
      c.disconnect();
    }
  }

  /** Claims made on the shared repository for a sandbox's pauses (their sealed content). */
  claimsOf(id: string): string[] {
    const dir = join(this.repo, "claims");
    if (!existsSync(dir)) return [];
    return readdirSync(dir)
      .filter((f) => f.startsWith(`${id}.`))
      .map((f) => readFileSync(join(dir, f), "utf8"));
  }

  /** Resolves after a heartbeat of the node that began after the call (its key's updatedAt moved). */
  async nextHeartbeat(id: string, timeoutMs = 15_000): Promise<void> {
    const c = this.client();
    const stamp = async () => {
      const raw = await c.get(`aenv:node:${id}`);
      return raw ? Number((JSON.parse(raw) as { updatedAt?: number }).updatedAt ?? 0) : 0;
    };
    try {
      const first = await stamp();
      const deadline = Date.now() + timeoutMs;
      while ((await stamp()) <= first) {
        if (Date.now() > deadline) throw new Error(`no heartbeat of ${id} in ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      c.disconnect();
    }
  }

  async close(): Promise<void> {
    // A profile is written at a clean exit only: gateways stop, nodes drain, before the kills.
    if (cpuProfileArgs().length > 0) {
      const exits = [...this.gateways.map((g) => g.proc), ...[...this.nodes.values()].map((s) => s.proc)]
        .filter((p) => p.exitCode === null && p.signalCode === null)
        .map((p) => {
          const exited = new Promise((r) => p.once("exit", r));
          p.kill("SIGTERM");
          return exited;
        });
      await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, 60_000))]);
    }
    for (const g of this.gateways) g.proc.kill("SIGKILL");
    // By data folder, the latest server on it (a test's restart of a node replaces it in `nodes`).
    const byDir = new Map<string, { id: string; s: TestServer; sim: boolean; net: Record<string, string> }>();
    for (const x of this.started) byDir.set(x.s.dataDir, x);
    for (const [id, s] of this.nodes) {
      const known = byDir.get(s.dataDir);
      byDir.set(s.dataDir, {
        id,
        s,
        sim: known?.sim ?? false,
        net: known?.net ?? {},
      });
    }
    await Promise.all([...byDir.values()].map(async ({ s }) => (alive(s) ? s.crash() : undefined)));
    // Crashed nodes leave runsc sandboxes and namespaces: a plain server on each data dir, with
    // the node's own prefix, cleans them up.
    for (const { s, sim, net } of byDir.values()) {
      if (!existsSync(s.dataDir)) continue; // the test removed it
      if (!sim) {
        const again = await startServer({ dataDir: s.dataDir, env: { ...net } });
        await again.stop();
      }
      cleanupDataDir(s);
    }
    this.redis?.kill("SIGKILL");
    this.sentinel?.close();
    this.hosts?.close();
    if (this.repo) rmSync(this.repo, { recursive: true, force: true });
    for (const d of this.templateDirs) {
      // Lazily served image trees outlive their node (aenv-lazyfs runs on its own).
      detachMountsUnder(d);
      rmSync(d, { recursive: true, force: true });
    }
  }
}
