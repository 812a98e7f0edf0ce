// More of the e2b 2.51 surface, driven by the unmodified SDK against a real server and real
// runsc sandboxes: list filters and order across pages, metrics kept over time and read by
// range, batch metrics and X-Total-Running, passwordless sudo/su for the default user, and file
// metadata in user.e2b.* xattrs.
import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ApiClient, ConnectionConfig, Sandbox } from "e2b";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
let a: Sandbox;
let b: Sandbox;
let c: Sandbox;

before(async () => {
  server = await startServer({ env: { AENV_METRICS_INTERVAL: "1" } });
  useE2b(server);
  // Three sandboxes started one after another, the middle one paused.
  a = await Sandbox.create({ metadata: { suite: "surface", n: "a" } });
  b = await Sandbox.create({ metadata: { suite: "surface", n: "b" } });
  c = await Sandbox.create({ metadata: { suite: "surface", n: "c" } });
  await b.pause();
});

after(async () => {
  await Promise.all([a, b, c].map((s) => s?.kill().catch(() => {})));
  await server?.stop();
  if (server) cleanupDataDir(server);
});

async function all(opts: Parameters<typeof Sandbox.list>[0]): Promise<string[]> {
  const p = Sandbox.list({ ...opts, limit: 1 } as never);
  const ids: string[] = [];
  while (p.hasNext) ids.push(...(await p.nextItems()).map((x) => x.sandboxId));
  return ids;
}

describe("list filters and order", () => {
  test("startedAfter is inclusive; order applies across pages; filters combine", async () => {
    const suite = { metadata: { suite: "surface" } };
    const ids = [a, b, c].map((s) => s.sandboxId);
    assert.deepEqual(await all({ query: suite, order: "asc" } as never), ids, "oldest first, one per page");
    assert.deepEqual(await all({ query: suite } as never), [...ids].reverse(), "newest first by default");
    const bStart = (await b.getInfo()).startedAt;
    assert.deepEqual(
      await all({ query: { ...suite, startedAfter: bStart }, order: "asc" } as never),
      [b.sandboxId, c.sandboxId],
      "at or after b's start",
    );
    assert.deepEqual(await all({ query: { ...suite, startedAfter: new Date(Date.now() + 60_000) } } as never), []);
    assert.deepEqual(
      await all({ query: { ...suite, startedAfter: bStart, state: ["running"] }, order: "asc" } as never),
      [c.sandboxId],
      "with state",
    );
    assert.deepEqual(await all({ query: { ...suite, template: "base" }, order: "asc" } as never), ids);
    assert.deepEqual(await all({ query: { ...suite, template: "no-such-template" } } as never), []);
    const bad = await server.api("GET", "/v2/sandboxes?startedAfter=yesterday");
    assert.equal(bad.status, 400);
  });
});

describe("metrics over time", () => {
  test("samples are kept at the interval and read by range; a range before the sandbox is empty", async () => {
    const t0 = new Date();
    await a.commands.run("sleep 3.5");
    const m = await a.getMetrics({ start: t0, end: new Date() });
    assert.ok(m.length >= 3, `${m.length} samples in 3.5 s at 1 s`);
    for (const x of m) {
      assert.ok(x.timestamp.getTime() >= Math.floor(t0.getTime() / 1000) * 1000, "not before start");
      assert.ok(x.memTotal > 0 && x.cpuCount > 0);
    }
    const times = m.map((x) => x.timestamp.getTime());
    assert.deepEqual(
      [...times].sort((p, q) => p - q),
      times,
      "oldest first",
    );
    const before = await a.getMetrics({
      start: new Date(Date.now() - 3_600_000),
      end: new Date(Date.now() - 1_800_000),
    });
    assert.deepEqual(before, []);
    const whole = await a.getMetrics();
    assert.ok(whole.length >= m.length, "no range: the whole history");
    const bad = await server.api("GET", `/sandboxes/${a.sandboxId}/metrics?start=20&end=10`);
    assert.equal(bad.status, 400);
  });
});

describe("batch metrics and X-Total-Running", () => {
  test("the SDK's API client reads the latest metric of each running sandbox named; the list counts running ones", async () => {
    const api = new ApiClient(new ConnectionConfig({ apiUrl: server.url, apiKey: server.apiKey })).api;
    const unknown = `i${"0".repeat(20)}`;
    const ids = [a.sandboxId, b.sandboxId, c.sandboxId, unknown];
    const res = await api.GET("/sandboxes/metrics", { params: { query: { sandbox_ids: ids } } });
    assert.equal(res.response.status, 200, JSON.stringify(res.error));
    const got = res.data?.sandboxes ?? {};
    // b is paused and the last ID names nothing: running sandboxes only.
    assert.deepEqual(Object.keys(got).sort(), [a.sandboxId, c.sandboxId].sort());
    assert.ok((got[a.sandboxId]?.memTotal ?? 0) > 0 && (got[a.sandboxId]?.cpuCount ?? 0) > 0);
    const many = Array.from({ length: 101 }, (_, i) => `i${String(i).padStart(20, "0")}`);
    const tooMany = await api.GET("/sandboxes/metrics", { params: { query: { sandbox_ids: many } } });
    assert.equal(tooMany.response.status, 400);

    const page = await server.api("GET", "/v2/sandboxes?limit=1&metadata=suite%3Dsurface");
    assert.equal(page.status, 200);
    assert.equal(page.headers.get("x-total-running"), "2", "a and c, before pagination");
    assert.equal((await server.api("GET", "/v2/sandboxes?state=paused")).headers.get("x-total-running"), null);
  });
});

describe("sudo and su for the default user", () => {
  test("sudo runs as root without a password; -E keeps the environment; su works", async () => {
    assert.equal((await c.commands.run("whoami")).stdout, "user\n");
    assert.equal((await c.commands.run("sudo whoami")).stdout, "root\n");
    assert.equal((await c.commands.run("sudo -n id -u")).stdout, "0\n");
    const apt = await c.commands.run("sudo -n apt-get install --dry-run --no-download coreutils | tail -1");
    assert.equal(apt.exitCode, 0);
    assert.equal((await c.commands.run("FOO=bar sudo -E sh -c 'echo $FOO'")).stdout, "bar\n");
    assert.equal((await c.commands.run("FOO=bar sudo sh -c 'echo [$FOO] $HOME'")).stdout, "[] /root\n");
    assert.equal(
      (await c.commands.run("echo secret | sudo tee /root/only-root >/dev/null && sudo cat /root/only-root")).stdout,
      "secret\n",
    );
    await assert.rejects(c.commands.run("cat /root/only-root"), "the user itself is still not root");
    const code = await c.commands.run("sudo sh -c 'exit 7'").catch((e: { exitCode?: number }) => e.exitCode);
    assert.equal(code, 7, "the command's exit status");
    assert.equal((await c.commands.run("su -c whoami")).stdout, "root\n");
    assert.equal((await c.commands.run("sudo su - user -c pwd")).stdout, "/home/user\n");
  });
});

describe("host files", () => {
  test("the data dir and the state database are the server's alone", () => {
    assert.equal(statSync(server.dataDir).mode & 0o777, 0o700);
    assert.equal(statSync(join(server.dataDir, "state.db")).mode & 0o777, 0o600);
    // Template trees keep images' setuid binaries: no host user may reach them.
    assert.equal(statSync(TEMPLATES_DIR).mode & 0o777, 0o700);
    // The egress CA's key stays the server's.
    assert.equal(statSync(join(server.dataDir, "egress-ca")).mode & 0o777, 0o700);
  });
});

describe("file metadata", () => {
  test("user.e2b.* xattrs set out of band show in getInfo and list", async () => {
    await c.files.write("/home/user/m.txt", "x");
    await c.commands.run(
      `python3 -c "import os; os.setxattr('/home/user/m.txt', 'user.e2b.owner', b'alice'); os.setxattr('/home/user/m.txt', 'user.other', b'no')"`,
    );
    const info = await c.files.getInfo("/home/user/m.txt");
    assert.deepEqual((info as unknown as { metadata?: Record<string, string> }).metadata, { owner: "alice" });
    const listed = (await c.files.list("/home/user")).find((e) => e.name === "m.txt");
    assert.deepEqual((listed as unknown as { metadata?: Record<string, string> }).metadata, { owner: "alice" });
  });
});
