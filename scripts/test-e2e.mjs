#!/usr/bin/env node
// Runs the test files that start real sandboxes in two lanes side by side: part of a file's
// time is spent waiting (a start, a restore, a timeout, an idle window), so a second lane gains
// time even on two cores, though each file runs about 1.6x slower beside another (measured
// here). Each lane has its own network
// prefix and slot range (AENV_TEST_NET_PREFIX / AENV_TEST_SLOT_CIDR, honoured by
// test/helpers/server.ts). Files that name fixed networks of their own, or share a fixed
// resource, form one chain that a single lane runs in order, so no two of them ever overlap.
// The few files that fail beside another run first, alone.
// A file's output is printed whole once it ends, then a summary; exit status 1 if any failed.
//
//   node scripts/test-e2e.mjs [--lanes N] [node --test options...] file...
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";

/**
 * Files that must not run beside each other (each line says why); a lane takes a chain whole.
 * The cluster helper gives its nodes 10.210-10.217; fs-pause and fs-pause-cluster both take
 * 10.241; restart tries 10.238, which cluster-partition's hosts use; repository-s3 and
 * volumes-secrets both take aev.
 */
const CHAINS = [
  [
    "test/cluster.test.ts",
    "test/sim-cluster.test.ts",
    "test/cluster-partition.test.ts",
    "test/restart.test.ts",
    "test/cluster-sentinel.test.ts",
    "test/cluster-upgrade.test.ts",
    "test/cluster-fencing.test.ts",
    "test/images-p2p.test.ts",
    "test/code-interpreter-gateway.test.ts",
    "test/fs-pause.test.ts",
    "test/fs-pause-cluster.test.ts",
    "test/metrics.test.ts",
  ],
  ["test/repository-s3.test.ts", "test/volumes-secrets.test.ts"],
];

/**
 * Files that run with nothing beside them, before the lanes start: those that drive Chromium.
 * Chromium watches the host's network interfaces and aborts its requests when they change
 * (net::ERR_NETWORK_CHANGED), and a server in the other lane adds and removes a sandbox's
 * interfaces all the time: the dashboard's page failed that way, and the desktop's live view
 * (noVNC's WebSocket) did not connect in 60 s, twice in six runs beside another file.
 */
const SOLO = ["test/desktop.test.ts", "test/dashboard.test.ts", "test/dashboard-gateway.test.ts"];

/** The longest files start first, so no lane is left with a long one at the end. */
const LONG_FIRST = [
  "test/bench-smoke.test.ts",
  "test/code-interpreter.test.ts",
  "test/admission.test.ts",
  "test/hibernation-save.test.ts",
  "test/network-policy.test.ts",
  "test/hibernation.test.ts",
  "test/paused-retention.test.ts",
  "test/repository-shared.test.ts",
  "test/cli.test.ts",
  "test/lifecycle.test.ts",
  "test/dashboard.test.ts",
  "test/deploy.test.ts",
  "test/egress-proxy.test.ts",
];

/** Each lane's network; lane 0 keeps the files' own defaults. */
const LANE_NETS = [
  { AENV_TEST_NET_PREFIX: "aet", AENV_TEST_SLOT_CIDR: "10.202.0.0/16" },
  { AENV_TEST_NET_PREFIX: "aes", AENV_TEST_SLOT_CIDR: "10.192.0.0/16" },
];

function parseArgs(argv) {
  const files = [];
  const opts = [];
  let lanes = 2;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--lanes") lanes = Math.max(1, Math.min(LANE_NETS.length, Number(argv[++i]) || 1));
    else if (a.startsWith("-")) opts.push(a);
    else files.push(a);
  }
  return { files, opts, lanes };
}

/** Work items: each chain's files that were asked for, then every other file alone; longest first. */
function plan(files) {
  const asked = new Set(files);
  const chained = new Set(CHAINS.flat());
  const items = CHAINS.map((c) => c.filter((f) => asked.has(f))).filter((c) => c.length > 0);
  const rank = (f) => {
    const i = LONG_FIRST.indexOf(f);
    return i < 0 ? LONG_FIRST.length : i;
  };
  const singles = files.filter((f) => !chained.has(f) && !SOLO.includes(f)).sort((a, b) => rank(a) - rank(b));
  return [...items, ...singles.map((f) => [f])];
}

/**
 * The most a file may take, all its tests and hooks: a test's own limit (--test-timeout) does
 * not end a file whose process is held open, by a server a failed hook left running say.
 */
const FILE_LIMIT_MS = Number(process.env.AENV_TEST_FILE_LIMIT_MS ?? 15 * 60_000);

/**
 * SIGKILL to a process and everything below it. By parent links in /proc, not a process
 * group: tini puts its child in a group of its own, and the tests' servers are further down.
 */
function killTree(root) {
  const children = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (!children.has(ppid)) children.set(ppid, []);
      children.get(ppid).push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  const all = [];
  for (const todo = [root]; todo.length > 0; ) {
    const pid = todo.pop();
    all.push(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  for (const pid of all) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}

function runFile(file, lane, opts) {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const p = spawn(
      "tini",
      ["-s", "--", process.execPath, "--import", "tsx", "--test", "--test-reporter=spec", ...opts, file],
      { env: { ...process.env, ...LANE_NETS[lane] }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    let overLimit = false;
    const limit = setTimeout(() => {
      overLimit = true;
      killTree(p.pid);
    }, FILE_LIMIT_MS);
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (out += d));
    p.on("close", (code, signal) => {
      clearTimeout(limit);
      if (overLimit) out += `\n✖ ${file} did not end within ${FILE_LIMIT_MS / 60_000} minutes: its processes were killed\n`;
      const count = (k) => Number(new RegExp(`^ℹ ${k} (\\d+)$`, "m").exec(out)?.[1] ?? 0);
      resolve({
        file,
        lane,
        code: overLimit ? 1 : (code ?? (signal ? 1 : 0)),
        s: (Date.now() - t0) / 1000,
        out,
        tests: count("tests"),
        pass: count("pass"),
        fail: count("fail"),
      });
    });
  });
}

async function main() {
  const { files, opts, lanes } = parseArgs(process.argv.slice(2));
  const queue = plan(files);
  const results = [];
  const t0 = Date.now();
  const run = async (f, n) => {
    const r = await runFile(f, n, opts);
    results.push(r);
    const verdict = r.code === 0 ? "ok" : "FAILED";
    process.stdout.write(`\n━━ ${f} · lane ${n} · ${r.s.toFixed(1)} s · ${verdict}\n${r.out}`);
  };
  for (const f of SOLO.filter((x) => files.includes(x))) await run(f, 0);
  const lane = async (n) => {
    for (let item = queue.shift(); item; item = queue.shift()) for (const f of item) await run(f, n);
  };
  await Promise.all(Array.from({ length: lanes }, (_, n) => lane(n)));
  const sum = (k) => results.reduce((a, r) => a + r[k], 0);
  const failed = results.filter((r) => r.code !== 0);
  process.stdout.write(
    `\n━━ ${results.length} files in ${lanes} lanes, ${((Date.now() - t0) / 1000).toFixed(0)} s` +
      ` (${sum("s").toFixed(0)} s of files): tests ${sum("tests")}, pass ${sum("pass")}, fail ${sum("fail")}\n`,
  );
  for (const r of [...results].sort((a, b) => b.s - a.s))
    process.stdout.write(`${r.s.toFixed(1).padStart(7)} s  lane ${r.lane}  ${r.code === 0 ? "ok    " : "FAILED"}  ${r.file}\n`);
  reportLeftovers(t0);
  if (failed.length > 0) {
    // Each failure's error again at the very end, where a reader of the log's tail sees it.
    for (const r of failed) process.stdout.write(`\n━━ ${r.file}: ${failureDigest(r.out)}`);
    process.stdout.write(`\n✖ failing files: ${failed.map((r) => r.file).join(", ")}\n`);
    process.exitCode = 1;
  }
}

/**
 * Test servers' data folders (test/helpers/server.ts) made during this run and still there:
 * a file that forgot to remove one leaves hundreds of MB a run. Named with the file that made
 * it, so the leak is found, not just seen.
 */
function reportLeftovers(since) {
  const root = "/var/tmp";
  const left = [];
  for (const name of readdirSync(root)) {
    if (!name.startsWith("aenv-test-")) continue;
    const dir = `${root}/${name}`;
    try {
      if (statSync(dir).birthtimeMs < since) continue;
      left.push(`${dir} (made by ${readFileSync(`${dir}/.test-owner`, "utf8") || "?"})`);
    } catch {
      left.push(`${dir} (made by ?)`);
    }
  }
  if (left.length) process.stdout.write(`\n! test servers' data folders left behind:\n  ${left.join("\n  ")}\n`);
}

/** The spec reporter's own list of failing tests and their errors (the end of a file's output), cut short. */
function failureDigest(out) {
  const at = out.lastIndexOf("✖ failing tests:");
  const lines = (at >= 0 ? out.slice(at) : out).trimEnd().split("\n");
  const keep = at >= 0 ? lines.slice(0, 80) : lines.slice(-40);
  return `${keep.join("\n")}${lines.length > keep.length ? "\n…" : ""}\n`;
}

await main();
