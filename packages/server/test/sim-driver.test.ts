// The simulated runtime (runtime/sim/): its latency draws, its envd stand-in as the node's own
// envd clients reach it, its images, the loopback slots it runs on, and how it is configured.
// No server, no runsc: part of npm run test:unit.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConfigError, loadConfig } from "../src/config.js";
import { LoopbackSlots } from "../src/network/loopback-slots.js";
import { envdRequest } from "../src/orchestrator/envd-client.js";
import { envdProcess } from "../src/orchestrator/envd-process.js";
import type { SandboxLaunch } from "../src/runtime/driver.js";
import { SimDriver } from "../src/runtime/sim/driver.js";
import { simulateCommand } from "../src/runtime/sim/envd-standin.js";
import { LatencyModel, SIM_LATENCIES } from "../src/runtime/sim/latency.js";

const dir = mkdtempSync("/var/tmp/aenv-sim-test-");
after(() => rmSync(dir, { recursive: true, force: true }));

/** A seeded uniform source (mulberry32): the same draws on every run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))] as number;

test("latency draws follow each operation's measured median and 95th percentile", () => {
  const model = new LatencyModel(1, seeded(7));
  for (const op of ["restore", "checkpoint", "command"] as const) {
    const xs = Array.from({ length: 20000 }, () => model.sample(op));
    const f = SIM_LATENCIES[op];
    assert.ok(Math.abs(quantile(xs, 0.5) / f.medianMs - 1) < 0.03, `${op} median`);
    assert.ok(Math.abs(quantile(xs, 0.95) / f.p95Ms - 1) < 0.05, `${op} p95`);
    assert.ok(Math.min(...xs) > 0, `${op} draws are positive`);
  }
  assert.equal(new LatencyModel(0).sample("boot"), 0, "scale 0: immediate");
  const half = new LatencyModel(0.5, () => 1);
  // u = 1 puts the normal draw at 0: the median itself, scaled.
  assert.equal(half.sample("restore"), SIM_LATENCIES.restore.medianMs / 2);
  assert.throws(() => new LatencyModel(-1));
});

test("simulated commands: true, false, exit N and echo; anything else is not found", () => {
  assert.deepEqual(simulateCommand("/bin/bash", ["-l", "-c", "true"]), { stdout: "", stderr: "", exitCode: 0 });
  assert.equal(simulateCommand("/bin/bash", ["-l", "-c", "false"]).exitCode, 1);
  assert.equal(simulateCommand("/bin/bash", ["-l", "-c", "exit 3"]).exitCode, 3);
  assert.equal(simulateCommand("/bin/bash", ["-l", "-c", "echo a  b"]).stdout, "a b\n");
  const other = simulateCommand("/bin/bash", ["-l", "-c", "ls /"]);
  assert.equal(other.exitCode, 127);
  assert.match(other.stderr, /not simulated/);
});

function launch(id: string, envdAddress: string | undefined): SandboxLaunch {
  return {
    id,
    rootfs: "/nonexistent",
    dir: join(dir, id),
    netnsPath: "",
    ...(envdAddress ? { envdAddress } : {}),
    cpuCount: 1,
    memoryMB: 128,
    hostname: "aenv",
    runtimeDir: "/nonexistent",
    resolvConf: "/nonexistent",
  };
}

test("a simulated sandbox answers envd's health, init and process calls on its slot address", async () => {
  const slots = new LoopbackSlots("127.231.0.0/16");
  const slot = await slots.acquire();
  const d = new SimDriver({ latencyScale: 0 });
  await d.start(launch("sim-a", slot.slotIp));
  try {
    assert.equal(await d.isRunning("sim-a"), true);
    assert.equal((await envdRequest(slot.slotIp, "GET", "/health")).status, 204);
    const init = await envdRequest(slot.slotIp, "POST", "/init", { body: { envVars: { A: "1" } } });
    assert.equal(init.status, 204);
    assert.deepEqual(JSON.parse((await envdRequest(slot.slotIp, "GET", "/envs")).body), { A: "1" });
    let out = "";
    const end = await envdProcess(
      slot.slotIp,
      { cmd: "/bin/bash", args: ["-l", "-c", "echo hello"] },
      { onOutput: (_s, t) => (out += t) },
    );
    assert.deepEqual(end, { exitCode: 0 });
    assert.equal(out, "hello\n");
    const unsimulated = await envdRequest(slot.slotIp, "GET", "/files");
    assert.equal(unsimulated.status, 501, "what is not simulated says so");
    // In envd's own error body, {code, message}.
    assert.equal(JSON.parse(unsimulated.body).code, 501);
    assert.match(JSON.parse(unsimulated.body).message, /not simulated/);
    const badInit = await envdRequest(slot.slotIp, "POST", "/init", { bytes: "{not json" });
    assert.equal(badInit.status, 400);
    assert.deepEqual(JSON.parse(badInit.body), { code: 400, message: "bad /init body" });
    assert.deepEqual(await d.list(), ["sim-a"]);
  } finally {
    await d.destroy("sim-a");
  }
  assert.equal(await d.isRunning("sim-a"), false);
  await assert.rejects(envdRequest(slot.slotIp, "GET", "/health", { timeoutMs: 500 }), "envd gone with its sandbox");
  await d.destroy("sim-a"); // idempotent
});

test("checkpoint, stop and restore elsewhere; suspend and freeze keep it running", async () => {
  const slots = new LoopbackSlots("127.231.0.0/16");
  const [a, b] = [await slots.acquire(), await slots.acquire()];
  assert.notEqual(a.slotIp, b.slotIp);
  const d = new SimDriver({ latencyScale: 0 });
  await d.start(launch("sim-b", a.slotIp));
  await d.suspend("sim-b");
  assert.equal(d.isSuspended("sim-b"), true);
  assert.equal(await d.isRunning("sim-b"), true);
  const image = mkdtempSync(join(dir, "image-"));
  assert.equal(d.isCompleteCheckpoint(image), false);
  await d.checkpoint("sim-b", image, { leaveRunning: false });
  assert.equal(d.isCompleteCheckpoint(image), true);
  assert.ok(d.checkpointBytes(image) > 0);
  assert.equal(await d.isRunning("sim-b"), false, "stopped after a checkpoint that does not leave it running");
  await d.restore(launch("sim-c", b.slotIp), image);
  assert.equal((await envdRequest(b.slotIp, "GET", "/health")).status, 204);
  await d.freeze("sim-c");
  assert.equal(d.cpuTimeNs("sim-c"), 0);
  await d.thaw("sim-c");
  await d.destroy("sim-c");
  await assert.rejects(d.restore(launch("sim-d", b.slotIp), mkdtempSync(join(dir, "empty-"))), /no simulated image/);
  await assert.rejects(d.start(launch("sim-e", undefined)), /envd address/);
  await assert.rejects(d.checkpoint("nobody", image, { leaveRunning: true }), /no sandbox/);
});

test("loopback slots: only a 127.X.0.0/16 range; released addresses come back", async () => {
  assert.throws(() => new LoopbackSlots("10.1.0.0/16"), /loopback/);
  const slots = new LoopbackSlots("127.232.0.0/16");
  const first = await slots.acquire();
  assert.match(first.slotIp, /^127\.232\./);
  await slots.release(first);
  const seen = new Set<number>();
  for (let i = 0; i < 16383; i++) seen.add((await slots.acquire()).index);
  assert.equal(seen.size, 16383, "every index handed out once");
  await assert.rejects(slots.acquire(), /no free network slots/);
});

test("runtime.driver = sim is configured like the real driver and needs a loopback slot range", () => {
  const env = { AENV_API_KEY: "k" };
  const cfg = loadConfig({ dataDir: dir }, { ...env, AENV_RUNTIME_DRIVER: "sim", AENV_SIM_LATENCY_SCALE: "0.5" });
  assert.equal(cfg.runtimeDriver, "sim");
  assert.equal(cfg.simLatencyScale, 0.5);
  assert.equal(cfg.slotCidr, "127.201.0.0/16");
  assert.equal(loadConfig({ dataDir: dir }, env).runtimeDriver, "gvisor");
  assert.throws(
    () => loadConfig({ dataDir: dir }, { ...env, AENV_RUNTIME_DRIVER: "sim", AENV_SLOT_CIDR: "10.9.0.0/16" }),
    ConfigError,
  );
  assert.throws(() => loadConfig({ dataDir: dir }, { ...env, AENV_RUNTIME_DRIVER: "kvm" }), ConfigError);
  assert.throws(
    () => loadConfig({ dataDir: dir }, { ...env, AENV_RUNTIME_DRIVER: "sim", AENV_SIM_LATENCY_SCALE: "-1" }),
    ConfigError,
  );
});
