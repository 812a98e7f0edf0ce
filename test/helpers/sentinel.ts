// Redis with high availability for tests: a primary, a replica and three sentinels, each a
// real redis-server process (sentinels are `redis-server CONF --sentinel`, the same binary
// Debian's redis-sentinel package links to) on free loopback ports.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import { freePort } from "./server.js";

export const MASTER_NAME = "aenv";

async function untilTrue(what: string, ok: () => Promise<boolean>, tries = 300): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await ok().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** One command to one server, no retries (a test's probe, not the system under test). */
async function ask(port: number, ...cmd: [string, ...Array<string | number>]): Promise<unknown> {
  const c = new Redis(port, "127.0.0.1", { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on("error", () => {});
  try {
    await c.connect();
    return await c.call(...cmd);
  } finally {
    c.disconnect();
  }
}

export class SentinelGroup {
  primaryPort = 0;
  replicaPort = 0;
  readonly sentinelPorts: number[] = [];
  private primary?: ChildProcess;
  private readonly procs: ChildProcess[] = [];
  private dir = "";

  /** `host:port,…` for --cluster-sentinels. */
  get sentinels(): string {
    return this.sentinelPorts.map((p) => `127.0.0.1:${p}`).join(",");
  }

  private server(args: string[]): ChildProcess {
    const p = spawn("redis-server", args, { stdio: "ignore" });
    this.procs.push(p);
    return p;
  }

  async start(): Promise<void> {
    this.dir = mkdtempSync("/var/tmp/aenv-sentinel-");
    this.primaryPort = await freePort();
    this.replicaPort = await freePort();
    // In the scratch dir: a replica keeps the copy it syncs from its primary on disk.
    const common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", this.dir];
    this.primary = this.server(["--port", String(this.primaryPort), ...common]);
    this.server(["--port", String(this.replicaPort), ...common, "--replicaof", "127.0.0.1", String(this.primaryPort)]);
    await untilTrue("the replica to sync", async () => {
      const info = String(await ask(this.replicaPort, "INFO", "replication"));
      return /master_link_status:up/.test(info);
    });
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      this.sentinelPorts.push(port);
      // Sentinels rewrite their file (what they learn): each its own. A second without the
      // primary is enough to call it down in a test; production keeps the default 30 s.
      const conf = join(this.dir, `sentinel-${port}.conf`);
      writeFileSync(
        conf,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${this.dir}`,
          `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${this.primaryPort} 2`,
          `sentinel down-after-milliseconds ${MASTER_NAME} 1000`,
          `sentinel failover-timeout ${MASTER_NAME} 10000`,
          `sentinel parallel-syncs ${MASTER_NAME} 1`,
          "",
        ].join("\n"),
      );
      this.server([conf, "--sentinel"]);
    }
    // A failover needs a quorum that knows the replica and each other (hello messages, ~2 s).
    for (const port of this.sentinelPorts) {
      await untilTrue(`sentinel ${port} to see the replica and the other sentinels`, async () => {
        const replicas = (await ask(port, "SENTINEL", "REPLICAS", MASTER_NAME)) as unknown[];
        const others = (await ask(port, "SENTINEL", "SENTINELS", MASTER_NAME)) as unknown[];
        return replicas.length === 1 && others.length === 2;
      });
    }
  }

  /** The primary's port as one sentinel reports it. */
  async masterPort(sentinelPort: number): Promise<number> {
    const a = (await ask(sentinelPort, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)) as [string, string];
    return Number(a[1]);
  }

  /** kill -9 of the primary: no goodbye to its clients, its replica or the sentinels. */
  killPrimary(): void {
    this.primary?.kill("SIGKILL");
  }

  /** Every sentinel names the replica as primary, and it answers as one. */
  async untilFailedOver(): Promise<void> {
    await untilTrue(
      "the sentinels to promote the replica",
      async () => {
        for (const s of this.sentinelPorts) if ((await this.masterPort(s)) !== this.replicaPort) return false;
        return /role:master/.test(String(await ask(this.replicaPort, "INFO", "replication")));
      },
      600,
    );
  }

  /** A client through the sentinels, as the nodes and gateways have (for the tests' own reads). */
  client(): Redis {
    const c = new Redis({
      sentinels: this.sentinelPorts.map((port) => ({ host: "127.0.0.1", port })),
      name: MASTER_NAME,
      maxRetriesPerRequest: 5,
    });
    c.on("error", () => {});
    return c;
  }

  close(): void {
    for (const p of this.procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}
