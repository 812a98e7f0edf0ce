// A real aenv-server process on the simulated runtime (runtime.driver = sim), for the fast tier:
// run from the build (scripts/test-unit.sh builds first: a server started through tsx costs
// 1.6 s more CPU, a tenth of the fast tier over its dozen servers), as whoever runs the tests
// (no root), its sandboxes records and an envd stand-in on loopback addresses. Everything but
// the sandbox is the real server: routes, orchestrator, state, pool, hibernation, repository.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const MAIN = fileURLToPath(new URL("../../dist/main.js", import.meta.url));
export const SIM_API_KEY = "e2b_0123456789abcdef0123456789abcdef01234567";

export interface SimServer {
  url: string;
  apiKey: string;
  logs: () => string;
  /**
   * Stops it (SIGTERM; SIGKILL with `crash`) and removes its folder, unless `keep`: then `dir`
   * starts it again.
   */
  stop: (o?: { keep?: boolean; crash?: boolean }) => Promise<void>;
  /** Its data and templates: `startSimServer(octet, env, { dir })` restarts on them. */
  dir: string;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** The SDK's options for this server. */
export function simSdk(s: SimServer): { apiUrl: string; sandboxUrl: string; apiKey: string } {
  return { apiUrl: s.url, sandboxUrl: s.url, apiKey: s.apiKey };
}

/**
 * Starts one; `slotOctet` picks its loopback range (127.X.0.0/16), distinct per file run side
 * by side. The `base` template is a record over an empty tree: nothing reads it.
 */
export async function startSimServer(
  slotOctet: number,
  env: Record<string, string> = {},
  o: { dir?: string } = {},
): Promise<SimServer> {
  const dir = o.dir ?? mkdtempSync("/var/tmp/aenv-sim-server-");
  const templates = join(dir, "templates");
  mkdirSync(join(templates, "base", "rootfs"), { recursive: true });
  if (!o.dir)
    writeFileSync(
      join(templates, "base", "template.json"),
      JSON.stringify({
        revision: 1,
        id: "base",
        name: "base",
        aliases: [],
        user: "user",
        workdir: "/home/user",
        env: {},
        cpuCount: 1,
        memoryMB: 256,
        diskSizeMB: 512,
        createdAt: new Date().toISOString(),
        updatedAt: new Date().toISOString(),
        rootfsDir: "rootfs",
        buildStatus: "ready",
        buildCount: 1,
        warm: true,
        tags: [],
      }),
    );
  const port = await freePort();
  const proc: ChildProcess = spawn(
    process.execPath,
    [
      MAIN,
      "--listen",
      `127.0.0.1:${port}`,
      "--data-dir",
      join(dir, "data"),
      "--templates-dir",
      templates,
      "--domain",
      `sbx.localhost:${port}`,
    ],
    {
      env: {
        ...process.env,
        AENV_API_KEY: SIM_API_KEY,
        AENV_RUNTIME_DRIVER: "sim",
        // Draws of zero: the lifecycle at the speed of the server's own code.
        AENV_SIM_LATENCY_SCALE: "0",
        AENV_SLOT_CIDR: `127.${slotOctet}.0.0/16`,
        AENV_NET_PREFIX: "aesu",
        AENV_LOG_LEVEL: "info",
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  const stop = async (s: { keep?: boolean; crash?: boolean } = {}) => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill(s.crash ? "SIGKILL" : "SIGTERM");
      await exited;
    }
    if (!s.keep) rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) {
      await stop();
      throw new Error(`aenv-server (sim) exited ${proc.exitCode}:\n${out}`);
    }
    const ok = await fetch(`${url}/health`).then(
      (r) => r.status === 204,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      proc.kill("SIGKILL");
      await stop();
      throw new Error(`aenv-server (sim) not ready within 30 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, apiKey: SIM_API_KEY, logs: () => out, stop, dir };
}
