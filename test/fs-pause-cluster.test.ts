// A filesystem-only pause in a cluster: its layer is committed to the shared repository like
// a memory pause's image, so when its node dies another node resumes it (a fresh boot there
// plus the layer) — driven by the unmodified e2b SDK through a gateway.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { TestCluster, via } from "./helpers/cluster.js";
import type { TestServer } from "./helpers/server.js";

const cluster = new TestCluster();
// One slot range for this file: node-b starts on it once node-a is dead (and cleans up after it).
const net = { AENV_NET_PREFIX: "aefa", AENV_SLOT_CIDR: "10.241.0.0/16" };

before(async () => {
  await cluster.start();
  await cluster.startNode("node-a", net);
  await cluster.startGateway();
});

after(() => cluster.close());

test("a filesystem-only pause resumes on another node after its node is killed -9", async () => {
  const g = cluster.gateways[0]?.url as string;
  const s = await Sandbox.create(via(g));
  await s.commands.run("echo kept > /home/user/f.txt && rm /etc/issue", { user: "root" });
  await s.commands.run("sleep 100000", { background: true });
  await s.pause({ keepMemory: false, ...via(g) } as never);
  const manifest = join(cluster.repo, "manifests", `sbx-${s.sandboxId}.json`);
  for (let i = 0; i < 300 && !existsSync(manifest); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(existsSync(manifest), "layer committed to the repository");
  assert.equal(await cluster.ownerOf(s.sandboxId), "node-a");
  await (cluster.nodes.get("node-a") as TestServer).crash();
  await cluster.startNode("node-b", net);
  const back = await Sandbox.connect(s.sandboxId, via(g));
  assert.equal(await cluster.ownerOf(s.sandboxId), "node-b");
  const out = await back.commands.run("cat /home/user/f.txt; test -e /etc/issue || echo issue-gone");
  assert.equal(out.stdout, "kept\nissue-gone\n");
  assert.equal((await back.commands.run("pgrep -f 'sleep 10000[0]' || echo none")).stdout.trim(), "none");
  await back.kill();
});
