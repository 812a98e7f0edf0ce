// Admission counts what sandboxes hold: resumes (connect and traffic auto-resume) take their
// place at once, so parallel ones never run more than the node admits; memory and CPU budgets
// refuse with a clear 503 and Retry-After (ServiceBusyError in the SDK: retry, nothing changed).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Sandbox, ServiceBusyError } from "e2b";
import { untilListening } from "./helpers/sandbox.js";
import { cleanupDataDir, getViaHost, sdkOptions, startServer, type TestServer } from "./helpers/server.js";

const CAP = 2;
const PAUSED = 4;

async function running(server: TestServer): Promise<number> {
  const r = await server.api("GET", "/v2/sandboxes?state=running");
  return (r.body as unknown[]).length;
}

/** PAUSED sandboxes paused on a node that runs at most CAP, each serving /i on port 8000. */
async function pausedSandboxes(server: TestServer, opts: Record<string, unknown> = {}): Promise<Sandbox[]> {
  const out: Sandbox[] = [];
  while (out.length < PAUSED) {
    const batch = await Promise.all(
      Array.from({ length: CAP }, () => Sandbox.create({ ...sdkOptions(server), timeoutMs: 300_000, ...opts })),
    );
    for (const s of batch) {
      await s.files.write("/tmp/www/i", s.sandboxId);
      await s.commands.run("cd /tmp/www && python3 -m http.server 8000", { background: true, timeoutMs: 0 });
      await untilListening(s, 8000);
    }
    for (const s of batch) assert.equal(await s.pause(), true);
    out.push(...batch);
  }
  assert.equal(await running(server), 0);
  return out;
}

/** Samples the running count until `done` settles; returns the most seen. */
async function peakWhile(server: TestServer, done: Promise<unknown>): Promise<number> {
  let settled = false;
  void done.finally(() => (settled = true)).catch(() => {});
  let peak = 0;
  while (!settled) {
    peak = Math.max(peak, await running(server));
    await new Promise((r) => setTimeout(r, 50));
  }
  return Math.max(peak, await running(server));
}

describe("resumes count against max_sandboxes at once", () => {
  let server: TestServer;
  test("parallel connects: each resumes or gets a 503, never more running than the cap", async () => {
    server = await startServer({ env: { AENV_MAX_SANDBOXES: String(CAP) } });
    const sbx = await pausedSandboxes(server);
    try {
      const all = Promise.allSettled(sbx.map((s) => Sandbox.connect(s.sandboxId, sdkOptions(server))));
      const peak = await peakWhile(server, all);
      const results = await all;
      const ok = results.filter((r) => r.status === "fulfilled");
      const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason as Error] : []));
      for (const e of refused) assert.ok(e instanceof ServiceBusyError, `${e.name}: ${e.message}`);
      assert.equal(ok.length, CAP, "as many resumed as the node admits");
      assert.ok(peak <= CAP, `at most ${CAP} ran at once (saw ${peak})`);
      assert.equal(await running(server), CAP);
      for (const r of ok) {
        const s = (r as PromiseFulfilledResult<Sandbox>).value;
        assert.equal((await s.commands.run("cat /tmp/www/i")).stdout, s.sandboxId);
      }
    } finally {
      await Promise.all(sbx.map((s) => Sandbox.kill(s.sandboxId, sdkOptions(server)).catch(() => false)));
    }
  });

  test("parallel traffic auto-resumes: each answers or gets a 503, never more running than the cap", async () => {
    const sbx = await pausedSandboxes(server, { lifecycle: { onTimeout: "pause", autoResume: true } });
    try {
      const hits = Promise.all(
        sbx.map((s) => getViaHost(server, `8000-${s.sandboxId}.${server.domain}`, "/i").then((r) => ({ s, r }))),
      );
      const peak = await peakWhile(server, hits);
      const answers = await hits;
      for (const { s, r } of answers) {
        assert.ok(r.status === 200 || r.status === 503, `status ${r.status}: ${r.body}`);
        if (r.status === 200) assert.equal(r.body, s.sandboxId);
        else assert.match(JSON.parse(r.body).message, /capacity/);
      }
      assert.equal(answers.filter((a) => a.r.status === 200).length, CAP);
      assert.ok(peak <= CAP, `at most ${CAP} ran at once (saw ${peak})`);
      assert.equal(await running(server), CAP);
    } finally {
      await Promise.all(sbx.map((s) => Sandbox.kill(s.sandboxId, sdkOptions(server)).catch(() => false)));
      await server.stop();
      cleanupDataDir(server);
    }
  });
});

describe("memory and CPU budgets", () => {
  // The base template: 2 vCPUs, 1024 MB. Each budget fits two sandboxes, not three.
  for (const [what, env, pattern] of [
    ["memory", { AENV_MAX_MEMORY_MB: "2500" }, /memory budget exceeded/],
    ["CPU", { AENV_MAX_CPUS: "5" }, /CPU budget exceeded/],
  ] as const) {
    test(`a create over the ${what} budget gets a 503 (ServiceBusyError) with Retry-After, a resume too`, async () => {
      const server = await startServer({ env });
      const opts = { ...sdkOptions(server), timeoutMs: 300_000 };
      const made: Sandbox[] = [];
      try {
        made.push(await Sandbox.create(opts), await Sandbox.create(opts));
        // As the SDK sees it and as the wire has it: E2B's error_code, a time to come back.
        const raw = await fetch(`${server.url}/sandboxes`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": server.apiKey },
          body: JSON.stringify({ templateID: "base" }),
        });
        assert.equal(raw.status, 503);
        assert.equal(raw.headers.get("retry-after"), "1");
        const body = (await raw.json()) as { code: number; message: string; error_code: string };
        assert.equal(body.code, 503);
        assert.equal(body.error_code, "sandbox_capacity_unavailable");
        assert.match(body.message, pattern);
        await assert.rejects(
          Sandbox.create(opts),
          (e: Error) => e instanceof ServiceBusyError && pattern.test(e.message),
        );
        // A paused one holds nothing: room for a new one; its resume is then over budget.
        const first = made[0] as Sandbox;
        assert.equal(await first.pause(), true);
        made.push(await Sandbox.create(opts));
        await assert.rejects(
          Sandbox.connect(first.sandboxId, opts),
          (e: Error) => e instanceof ServiceBusyError && pattern.test(e.message),
        );
        assert.equal(await running(server), 2);
      } finally {
        await Promise.all(made.map((s) => s.kill().catch(() => false)));
        await server.stop();
        cleanupDataDir(server);
      }
    });
  }
});
