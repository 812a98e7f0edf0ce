// The web dashboard in a real browser (Debian's chromium through playwright-core) against a
// real server and real sandboxes: sign-in, live list, a sandbox's page, its terminal and
// its lifecycle buttons, each checked through the e2b SDK. It takes a screenshot of each page
// (AENV_TEST_SCREENSHOTS=docs/dashboard: the ones docs/dashboard.md shows).
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox, Template } from "e2b";
import type { Page } from "playwright-core";
import { openBrowser, screenshotsDir, type TestBrowser } from "./helpers/browser.js";
import { ROOT, serverForFile } from "./helpers/server.js";

// Samples every second: the chart has points within the test's patience.
const srv = serverForFile({ env: { AENV_METRICS_INTERVAL: "1" } });
const SHOTS = screenshotsDir(ROOT);

let browser: TestBrowser;
let page: Page;
let sbx: Sandbox;
before(async () => {
  browser = await openBrowser();
  page = browser.page;
  mkdirSync(SHOTS, { recursive: true });
});
after(async () => {
  await sbx?.kill().catch(() => undefined);
  await browser?.close();
});

const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`) });

async function until(what: string, cond: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * The refusals the page expects: the wrong key (401 on its one check), GET /nodes on a server
 * that is not in a cluster (404), the keys page signed in with a key that is not the
 * operator's (403). Any other answer over 400 fails the suite.
 */
const EXPECTED_FAILURES = new Set(["401 GET /v2/sandboxes", "404 GET /nodes", "403 GET /api-keys"]);
/**
 * The browser's own log lines about those answers, and about the terminal's stream that a
 * pause cuts (an incomplete chunked answer). Every other console error and every uncaught
 * exception fails.
 */
const EXPECTED_LOG =
  /^console: Failed to load resource: (the server responded with a status of (401|403|404)|net::ERR_INCOMPLETE_CHUNKED_ENCODING)/;

describe("dashboard", () => {
  test("the page and its files are served without the key; the API still needs it", async () => {
    const s = srv();
    const html = await fetch(`${s.url}/`, { headers: { accept: "text/html" } });
    assert.equal(html.status, 200);
    assert.match(html.headers.get("content-type") ?? "", /text\/html/);
    assert.match(html.headers.get("content-security-policy") ?? "", /default-src 'self'/);
    const body = await html.text();
    const asset = /src="(\/dashboard\/assets\/[^"]+\.js)"/.exec(body)?.[1];
    assert.ok(asset, body);
    assert.equal((await fetch(`${s.url}${asset}`)).status, 200);
    // Only the bundle's files: no path of a request reaches the file system.
    for (const p of [
      "/dashboard/index.html",
      "/dashboard/%2e%2e/package.json",
      "/dashboard/assets/%2e%2e/index.html",
    ]) {
      const r = await fetch(`${s.url}${p}`);
      assert.ok(r.status === 404 || r.status === 401, `${p}: ${r.status}`);
      assert.ok(!(await r.text()).includes("@aenv"), p);
    }
    // An API client asking for / gets the API's answer, not the page.
    assert.equal((await fetch(`${s.url}/`, { headers: { accept: "application/json" } })).status, 404);
    assert.equal((await fetch(`${s.url}/v2/sandboxes`)).status, 401);
  });

  test("without the key the page shows no data; a wrong key is refused with a clear message", async () => {
    const s = srv();
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { purpose: "dashboard-test" } });
    await page.goto(`${s.url}/`);
    const key = page.getByLabel("API key");
    await key.waitFor();
    assert.equal(await page.getByRole("table").count(), 0);
    assert.ok(!(await page.content()).includes(sbx.sandboxId), "no sandbox shown before sign-in");
    // A deep link does not get past sign-in either.
    await page.goto(`${s.url}/#/sandboxes/${sbx.sandboxId}`);
    await key.waitFor();
    assert.ok(!(await page.content()).includes("dashboard-test"));

    await key.fill("e2b_not-the-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").filter({ hasText: "refused" }).waitFor();
    await shot("sign-in");
    assert.equal(await page.getByRole("table").count(), 0);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0, "a refused key is not kept");
    assert.ok(!page.url().includes("e2b_"), "the key is never in the URL");
  });

  test("signed in, a sandbox created by the SDK appears without a reload", async () => {
    const s = srv();
    await page.goto(`${s.url}/`);
    await page.getByLabel("API key").fill(s.apiKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    const table = page.getByRole("table", { name: "Sandboxes" });
    await table.waitFor();
    await page.getByRole("link", { name: sbx.sandboxId }).waitFor();
    const late = await Sandbox.create({ timeoutMs: 120_000, metadata: { purpose: "late" } });
    try {
      // Polled every 1.5 s: a few ticks at most.
      await page.getByRole("link", { name: late.sandboxId }).waitFor({ timeout: 10_000 });
      const row = page.getByRole("row").filter({ hasText: late.sandboxId });
      assert.match(String(await row.textContent()), /running/);
      assert.match(String(await row.textContent()), /purpose=late/);
      // The node it runs on, as the API names it.
      const info = (await s.api("GET", `/sandboxes/${late.sandboxId}`)).body as { nodeID?: string };
      assert.ok(info.nodeID, "the API names the node");
      assert.ok(String(await row.textContent()).includes(info.nodeID), "the row names the node");
      // The metadata filter is the API's.
      await page.getByLabel("Metadata").fill("purpose=late");
      await until(
        "only the filtered sandbox",
        async () => (await page.getByRole("link", { name: sbx.sandboxId }).count()) === 0,
      );
      await page.getByLabel("Metadata").fill("");
      await page.getByRole("link", { name: sbx.sandboxId }).waitFor();
      await shot("sandboxes");
    } finally {
      await late.kill();
    }
    await until(
      "a killed sandbox leaves the table",
      async () => (await page.getByRole("link", { name: late.sandboxId }).count()) === 0,
    );
    assert.ok(!page.url().includes(s.apiKey), "the key is never in the URL");
  });

  test("a sandbox's page shows its state and a metrics chart", async () => {
    await page.getByRole("link", { name: sbx.sandboxId }).click();
    await page.getByRole("heading", { name: sbx.sandboxId }).waitFor();
    assert.equal(await page.getByTestId("sandbox-state").textContent(), "running");
    const cpu = page.getByRole("figure", { name: "CPU chart" });
    await until("CPU samples in the chart", async () => Number(await cpu.getAttribute("data-points")) >= 2);
    assert.equal(await cpu.locator("canvas").count(), 1);
    await page.getByRole("figure", { name: "Memory chart" }).locator("canvas").waitFor();
    assert.match(String(await page.locator(".fields").textContent()), /purpose=dashboard-test/);
    await shot("sandbox");
  });

  test("a command typed in the terminal runs in the sandbox", async () => {
    await page.getByRole("tab", { name: "Terminal" }).click();
    await page.locator('[data-status="connected"]').waitFor();
    await page.locator(".term-box").click();
    await page.keyboard.type("echo hi > /tmp/x\n");
    await until("the file the shell wrote", async () => (await sbx.files.read("/tmp/x")) === "hi\n");
    await page.keyboard.type("uname -a; ls /\n");
    await page.waitForTimeout(500);
    await shot("terminal");
  });

  test("the files tab lists a folder of the sandbox", async () => {
    await sbx.files.write("/tmp/listed.txt", "for the files tab");
    await page.getByRole("tab", { name: "Files" }).click();
    await page.getByLabel("Path").fill("/tmp");
    await page.getByRole("button", { name: "Open" }).click();
    await page.getByRole("button", { name: "Download listed.txt" }).waitFor();
    await shot("files");
    const download = page.waitForEvent("download");
    await page.getByRole("button", { name: "Download listed.txt" }).click();
    const got = await download;
    assert.equal(got.suggestedFilename(), "listed.txt");
    assert.equal(readFileSync(await got.path(), "utf8"), "for the files tab");
    await page.getByLabel("Upload files").setInputFiles({
      name: "up.txt",
      mimeType: "text/plain",
      buffer: Buffer.from("uploaded from the browser"),
    });
    await page.getByRole("button", { name: "Download up.txt" }).waitFor();
    assert.equal(await sbx.files.read("/tmp/up.txt"), "uploaded from the browser");
  });

  test("the terminal follows the window's size", async () => {
    await page.getByRole("tab", { name: "Terminal" }).click();
    await page.locator('[data-status="connected"]').waitFor();
    /** What the shell's PTY says its size is ("rows cols"), asked by a command typed in it. */
    const size = async () => {
      await sbx.files.remove("/tmp/size").catch(() => undefined);
      await page.locator(".term-box").click();
      await page.keyboard.type("stty size > /tmp/size.t && mv /tmp/size.t /tmp/size\n");
      let got = "";
      await until("stty's answer", async () => /^\d+ \d+$/.test((got = (await sbx.files.read("/tmp/size")).trim())));
      return got;
    };
    const before = await size();
    await page.setViewportSize({ width: 1280, height: 600 });
    try {
      let after = before;
      await until("the shell sees fewer rows", async () => (after = await size()) !== before);
      assert.ok(Number(after.split(" ")[0]) < Number(before.split(" ")[0]), `${before} -> ${after}`);
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
  });

  test("Fork starts the count asked for", async () => {
    await page.getByRole("tab", { name: "Overview" }).click();
    await page.getByLabel("Fork count").fill("2");
    await page.getByRole("button", { name: "Fork", exact: true }).click();
    await page.getByRole("status").filter({ hasText: "Fork: 2 of 2 started" }).waitFor({ timeout: 60_000 });
    const children = (await Sandbox.list({ query: { state: ["running"] } }).nextItems()).filter(
      (x) => x.sandboxId !== sbx.sandboxId,
    );
    assert.equal(children.length, 2);
    await Promise.all(children.map((c) => Sandbox.kill(c.sandboxId)));
  });

  test("Pause and Resume change the state; the terminal re-attaches to its shell", async () => {
    await page.getByRole("tab", { name: "Terminal" }).click();
    await page.getByRole("button", { name: "Pause" }).click();
    await until("paused, says the SDK", async () => (await Sandbox.getInfo(sbx.sandboxId)).state === "paused", 60_000);
    await until("paused on the page", async () => (await page.getByTestId("sandbox-state").textContent()) === "paused");
    await page.locator('[data-status="disconnected"]').waitFor();
    await page.getByRole("button", { name: "Resume" }).click();
    await until(
      "running, says the SDK",
      async () => (await Sandbox.getInfo(sbx.sandboxId)).state === "running",
      60_000,
    );
    await page.locator('[data-status="connected"]').waitFor({ timeout: 30_000 });
    await page.locator(".term-box").click();
    await page.keyboard.type("echo again > /tmp/y\n");
    await until("the file the re-attached shell wrote", async () => (await sbx.files.read("/tmp/y")) === "again\n");
  });

  test("Snapshot, then the other pages", async () => {
    const vol = await srv().api("POST", "/volumes", { name: "dashboard-data" });
    assert.equal(vol.status, 201, JSON.stringify(vol.body));
    await page.getByRole("tab", { name: "Overview" }).click();
    await page.getByRole("button", { name: "Snapshot" }).click();
    await page
      .getByRole("status")
      .filter({ hasText: /Snapshot .* taken/ })
      .waitFor({ timeout: 60_000 });
    for (const [name, heading] of [
      ["templates", "Templates"],
      ["snapshots", "Snapshots"],
      ["volumes", "Volumes"],
      ["nodes", "Nodes"],
    ] as const) {
      await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: heading }).click();
      await page.getByRole("heading", { name: heading, level: 1 }).waitFor();
      if (name === "snapshots")
        await page.getByRole("table", { name: "Snapshots" }).getByText(sbx.sandboxId).first().waitFor();
      if (name === "volumes") await page.getByRole("table", { name: "Volumes" }).getByText("dashboard-data").waitFor();
      if (name === "templates") {
        // The first template's last build (with this shared templates folder, often a failed one).
        await page.getByRole("table", { name: "Templates" }).getByText("base", { exact: true }).first().waitFor();
        const logs = page.getByRole("button", { name: /^Build logs of / }).first();
        if (await logs.count()) {
          await logs.click();
          await page.getByLabel("Build logs", { exact: true }).waitFor();
        }
      }
      await page.waitForTimeout(300);
      // The Nodes page is shot through a gateway (test/dashboard-gateway.test.ts): here it only says
      // this server is not in a cluster.
      // Templates are shot with a build's log in the build test below.
      if (name !== "nodes" && name !== "templates") await shot(name);
    }
  });

  test("API keys: made in the page with a limit and shown once; that key sees none of the operator's sandboxes; revoked", async () => {
    const s = srv();
    const signIn = async (key: string) => {
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByLabel("API key").fill(key);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sandboxes" }).click();
      await page.getByRole("heading", { name: "Sandboxes", level: 1 }).waitFor();
    };
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "API keys" }).click();
    await page.getByRole("heading", { name: "API keys", level: 1 }).waitFor();
    const form = page.getByRole("form", { name: "New API key" });
    await form.getByLabel("Name").fill("dash-trainer");
    await form.getByLabel("Max sandboxes").fill("2");
    await form.getByRole("button", { name: "Create key" }).click();
    const shown = page.getByRole("status").filter({ hasText: "not shown again" });
    await shown.waitFor();
    const key = String(await shown.locator("code").textContent());
    assert.match(key, /^e2b_[0-9a-f]{40}$/);
    const row = page.getByRole("table", { name: "API keys" }).getByRole("row").filter({ hasText: "dash-trainer" });
    await row.filter({ hasText: "2 sandboxes" }).waitFor();
    assert.ok(!String(await row.textContent()).includes(key), "listed masked");
    await shot("keys");
    const listed = (await s.api("GET", "/api-keys")).body as Array<{ id: string; name: string }>;
    assert.ok(listed.some((k) => k.name === "dash-trainer"));

    await signIn(key);
    await page.waitForTimeout(2000);
    assert.ok(!(await page.content()).includes(sbx.sandboxId), "the operator's sandbox is not this key's");
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "API keys" }).click();
    await page.getByText("managed with the operator's key").waitFor();

    await signIn(s.apiKey);
    await page.getByRole("link", { name: sbx.sandboxId }).waitFor();
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "API keys" }).click();
    await page.getByRole("button", { name: "Revoke dash-trainer" }).click();
    await page.getByRole("button", { name: "Confirm revoke" }).click();
    await until("the key is gone from the table", async () => (await row.count()) === 0);
    const after = await fetch(`${s.url}/v2/sandboxes`, { headers: { "x-api-key": key } });
    assert.equal(after.status, 401, "a revoked key opens nothing");
  });

  test("a template's build log streams while the build runs", async () => {
    const s = srv();
    // A step that prints, waits, then prints again: the first line is shown before the build ends.
    const tpl = Template()
      .fromTemplate("base")
      .runCmd("echo dashboard-log-first && sleep 6 && echo dashboard-log-second");
    const build = await Template.buildInBackground(tpl, "dashboard-build", { apiUrl: s.url, apiKey: s.apiKey });
    try {
      await page.goto(`${s.url}/#/templates`);
      const open = page.getByRole("button", { name: `Build logs of ${build.templateId}` });
      await open.waitFor({ timeout: 30_000 });
      await open.click();
      const log = page.getByLabel("Build logs", { exact: true });
      await log.filter({ hasText: "dashboard-log-first" }).waitFor({ timeout: 120_000 });
      const status = async () =>
        (await Template.getBuildStatus(build, { apiUrl: s.url, apiKey: s.apiKey })).status as string;
      assert.equal(await status(), "building", "the first line is shown while the build runs");
      await log.filter({ hasText: "dashboard-log-second" }).waitFor({ timeout: 120_000 });
      await page.locator(".build-log .state-ready").waitFor({ timeout: 60_000 });
      await page.screenshot({ path: join(SHOTS, "templates.png"), fullPage: true });
    } finally {
      await s.api("DELETE", `/templates/${build.templateId}`);
    }
  });

  test("Kill asks first, then kills", async () => {
    await page.goto(`${srv().url}/#/sandboxes/${sbx.sandboxId}`);
    await page.getByRole("button", { name: "Kill" }).click();
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "running", "not before the confirmation");
    await page.getByRole("button", { name: "Confirm kill" }).click();
    await until("gone, says the SDK", async () => {
      try {
        await Sandbox.getInfo(sbx.sandboxId);
        return false;
      } catch {
        return true;
      }
    });
    await page.getByRole("table", { name: "Sandboxes" }).waitFor();
  });

  test("thousands of sandboxes: only the rows in view are drawn, and scrolling reaches the last", async () => {
    // The list answer is replaced in the browser (no server holds 5000 sandboxes here).
    const now = Date.now();
    const many = Array.from({ length: 5000 }, (_, i) => ({
      sandboxID: `many${String(i).padStart(5, "0")}`,
      templateID: "base",
      alias: "base",
      clientID: "x",
      cpuCount: 1,
      memoryMB: 512,
      diskSizeMB: 1024,
      startedAt: new Date(now - i * 1000).toISOString(),
      endAt: new Date(now + 600_000).toISOString(),
      state: i % 3 ? "running" : "paused",
      envdVersion: "0.6.4",
      metadata: { n: String(i) },
      volumeMounts: [],
    }));
    await page.route("**/v2/sandboxes?*", (route) => route.fulfill({ json: many }));
    try {
      await page.goto(`${srv().url}/#/sandboxes`);
      await page.getByRole("link", { name: "many00000" }).waitFor();
      const rows = page.getByRole("table", { name: "Sandboxes" }).locator("tbody tr:not(.spacer)");
      assert.ok((await rows.count()) < 100, `${await rows.count()} rows drawn`);
      await page.locator(".scroller").evaluate((el) => el.scrollTo(0, el.scrollHeight));
      await page.getByRole("link", { name: "many04999" }).waitFor({ timeout: 2000 });
      assert.ok((await rows.count()) < 100, `${await rows.count()} rows drawn after the scroll`);
      assert.match(String(await page.getByText(/5000 shown/).textContent()), /3333 running · 1667 paused/);
    } finally {
      await page.unroute("**/v2/sandboxes?*");
    }
  });

  test("no page errors", () => {
    assert.deepEqual(
      browser.errors.filter((e) => !EXPECTED_LOG.test(e)),
      [],
    );
    assert.deepEqual(
      browser.failed.filter((f) => !EXPECTED_FAILURES.has(f)),
      [],
    );
  });
});
