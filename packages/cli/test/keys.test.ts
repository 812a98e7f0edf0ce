// `aenv keys` against a real server on the simulated runtime: a key made with limits, shown
// once, listed masked, re-limited, revoked; the key then opens nothing.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type SimServer, startSimServer } from "../../server/test/helpers/sim-server.js";

let server: SimServer;
before(async () => {
  server = await startSimServer(159);
});
after(() => server?.stop());

const BIN = join(import.meta.dirname, "..", "bin", "aenv.js");

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = spawnSync(process.execPath, [BIN, "-o", "json", ...argv], {
    env: { ...process.env, AENV_API_URL: server.url, AENV_API_KEY: server.apiKey },
    encoding: "utf8",
    timeout: 30_000,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

test("aenv keys create|ls|limit|rm", async () => {
  const made = await cli("keys", "create", "trainer", "--max-sandboxes", "3", "--creates-per-second", "2");
  assert.equal(made.code, 0, made.err);
  const k = JSON.parse(made.out) as { id: string; key: string; limits: unknown };
  assert.match(k.key, /^e2b_[0-9a-f]{40}$/);
  assert.deepEqual(k.limits, { maxSandboxes: 3, createsPerSecond: 2 });
  const ls = await cli("keys", "ls");
  const listed = JSON.parse(ls.out) as Array<{ id: string; key?: string }>;
  assert.ok(listed.some((x) => x.id === k.id && x.key === undefined));
  const limited = await cli("keys", "limit", k.id, "--max-sandboxes", "10");
  assert.deepEqual((JSON.parse(limited.out) as { limits: unknown }).limits, { maxSandboxes: 10 });
  assert.equal((await cli("keys", "create", "x", "--max-sandboxes", "-1")).code, 2);
  assert.equal((await cli("keys", "rm", k.id)).code, 0);
  const after = await fetch(`${server.url}/sandboxes`, { headers: { "x-api-key": k.key } });
  assert.equal(after.status, 401);
});
