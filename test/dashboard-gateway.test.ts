// The dashboard once through a gateway: one node and one gateway of this file's own (its own
// Redis on a free port; the node on this run's netns prefix and slot range), the page from the
// gateway, a sandbox created through it appearing, its terminal reached through it, and the
// Nodes page listing the node. The Nodes page's screenshot is taken here (helpers/browser.ts
// says where it goes).
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { openBrowser, screenshotsDir, type TestBrowser } from "./helpers/browser.js";
import { TEST_REPOSITORY_KEY } from "./helpers/repository.js";
import { cleanupDataDir, freePort, ROOT, startServer, type TestServer } from "./helpers/server.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function untilUp(url: string, what: string, proc: ChildProcess, logs: () => string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (proc.exitCode !== null) throw new Error(`${what} exited ${proc.exitCode}:\n${logs()}`);
    const r = await fetch(url).catch(() => undefined);
    if (r?.status === 204) return;
    await sleep(100);
  }
  throw new Error(`${what} did not start:\n${logs()}`);
}

function spawnLogged(cmd: string, args: string[], env: NodeJS.ProcessEnv): { proc: ChildProcess; logs: () => string } {
  const proc = spawn(cmd, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  return { proc, logs: () => out };
}

let redis: ChildProcess | undefined;
let gateway: ChildProcess | undefined;
let node: TestServer | undefined;
let repo = "";
let gw = "";
let browser: TestBrowser;

before(async () => {
  const redisPort = await freePort();
  redis = spawn(
    "redis-server",
    ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    {
      stdio: "ignore",
    },
  );
  const redisUrl = `redis://127.0.0.1:${redisPort}`;
  repo = mkdtempSync("/var/tmp/aenv-dashboard-repo-");
  node = await startServer({
    env: {
      AENV_CLUSTER: redisUrl,
      AENV_NODE_ID: "dash-node",
      AENV_REPOSITORY_PATH: repo,
      AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY,
      AENV_GC_INTERVAL: "0",
    },
  });
  const port = await freePort();
  const g = spawnLogged(
    process.execPath,
    [join(ROOT, "packages/gateway/bin/aenv-gateway.js"), "--listen", `127.0.0.1:${port}`, "--cluster", redisUrl],
    { ...process.env, AENV_API_KEY: node.apiKey, AENV_LOG_LEVEL: "info" },
  );
  gateway = g.proc;
  gw = `http://127.0.0.1:${port}`;
  await untilUp(`${gw}/health`, "aenv-gateway", g.proc, g.logs);
  browser = await openBrowser();
});

after(async () => {
  await browser?.close();
  gateway?.kill("SIGTERM");
  await node?.stop();
  if (node) cleanupDataDir(node);
  redis?.kill("SIGKILL");
  if (repo) rmSync(repo, { recursive: true, force: true });
});

async function until(what: string, cond: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await sleep(200);
  }
}

describe("dashboard through a gateway", () => {
  test("sign in, a sandbox created through the gateway, its terminal, the Nodes page", async () => {
    const { page } = browser;
    const sdk = { apiUrl: gw, sandboxUrl: gw, apiKey: node!.apiKey };
    await page.goto(`${gw}/`);
    await page.getByLabel("API key").fill(node!.apiKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("table", { name: "Sandboxes" }).waitFor();
    const sbx = await Sandbox.create({ ...sdk, timeoutMs: 120_000, metadata: { via: "gateway" } });
    try {
      await page.getByRole("link", { name: sbx.sandboxId }).click();
      await page.getByRole("heading", { name: sbx.sandboxId }).waitFor();
      assert.equal(await page.getByTestId("sandbox-state").textContent(), "running");
      await page.getByRole("tab", { name: "Terminal" }).click();
      await page.locator('[data-status="connected"]').waitFor();
      await page.locator(".term-box").click();
      await page.keyboard.type("echo via-gateway > /tmp/g\n");
      await until("the file the shell wrote", async () => (await sbx.files.read("/tmp/g")) === "via-gateway\n");

      await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Nodes" }).click();
      const row = page.getByRole("table", { name: "Nodes" }).getByRole("row").filter({ hasText: "dash-node" });
      await row.waitFor();
      assert.match(String(await row.textContent()), /ready/);
      mkdirSync(screenshotsDir(ROOT), { recursive: true });
      await page.screenshot({ path: join(screenshotsDir(ROOT), "nodes.png") });
    } finally {
      await sbx.kill();
    }
    assert.deepEqual(browser.failed, []);
    assert.deepEqual(
      browser.errors.filter((e) => !/^console: Failed to load resource: net::ERR_INCOMPLETE_CHUNKED_ENCODING/.test(e)),
      [],
    );
  });
});
