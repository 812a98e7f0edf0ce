// Drives a running aenv endpoint (a node or a gateway) with the unmodified e2b SDK: create,
// run a command, write a file, start a background process, pause, resume, check that the
// file and the process came back, kill. Prints one line per step and exits non-zero on any
// failure. Used by scripts/test-deploy.sh against the installed server, the container image
// and the compose stack. With --drain-cmd (a gateway only), the sandbox's node is then stopped
// by that shell command ({node} is replaced by its node ID), which must drain it, and the
// sandbox must resume on another node with its file and process.
//   node --import tsx test/deploy/smoke.ts URL API_KEY [--no-pause] [--drain-cmd CMD]
import { execSync } from "node:child_process";
import { Sandbox } from "e2b";

const [url, apiKey] = process.argv.slice(2);
const pause = !process.argv.includes("--no-pause");
const drainAt = process.argv.indexOf("--drain-cmd");
const drainCmd = drainAt > 0 ? process.argv[drainAt + 1] : undefined;
if (!url || !apiKey) {
  console.error("usage: smoke.ts URL API_KEY [--no-pause]");
  process.exit(2);
}
const opts = { apiUrl: url, sandboxUrl: url, apiKey };
const t0 = Date.now();
const step = (what: string) => console.log(`smoke: ${what} (${Date.now() - t0} ms)`);
function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`check failed: ${what}`);
}

const sbx = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
try {
  step(`created ${sbx.sandboxId}`);
  const r = await sbx.commands.run("echo hi-$((6*7)) && uname -s");
  check(r.stdout === "hi-42\nLinux\n", `command output ${JSON.stringify(r.stdout)}`);
  step("command ran");
  await sbx.files.write("/home/user/kept.txt", "kept");
  await sbx.commands.run("sleep 100000", { background: true });
  const pid = (await sbx.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
  check(pid !== "", "background process running");
  if (pause) {
    await sbx.pause();
    step("paused");
    const back = await Sandbox.connect(sbx.sandboxId, opts);
    step("resumed");
    check((await back.files.read("/home/user/kept.txt")) === "kept", "file kept across pause");
    const again = (await back.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
    check(again === pid, `process kept across pause (${pid} -> ${again})`);
    step("file and process intact");
  }
  if (drainCmd) {
    // Which node holds it, once its heartbeat (every 2 s) says so.
    let owner: string | undefined;
    let nodes: Array<{ nodeID: string; sandboxCount: number }> = [];
    for (let i = 0; i < 50 && owner === undefined; i++) {
      const r = await fetch(`${url}/nodes`, { headers: { "x-api-key": apiKey } });
      nodes = (await r.json()) as typeof nodes;
      owner = nodes.find((n) => n.sandboxCount > 0)?.nodeID;
      if (owner === undefined) await new Promise((res) => setTimeout(res, 200));
    }
    check(owner !== undefined, `a node holds the sandbox (${JSON.stringify(nodes)})`);
    execSync(drainCmd.replaceAll("{node}", owner as string), { stdio: "inherit" });
    step(`stopped ${owner} (drain)`);
    const moved = await Sandbox.connect(sbx.sandboxId, opts);
    // Node counts come from heartbeats (every 2 s).
    let now: string | undefined;
    for (let i = 0; i < 50 && (now === undefined || now === owner); i++) {
      await new Promise((res) => setTimeout(res, 200));
      const a = await fetch(`${url}/nodes`, { headers: { "x-api-key": apiKey } });
      now = ((await a.json()) as Array<{ nodeID: string; sandboxCount: number }>).find(
        (n) => n.sandboxCount > 0,
      )?.nodeID;
    }
    check(now !== undefined && now !== owner, `resumed on another node (${owner} -> ${now})`);
    check((await moved.files.read("/home/user/kept.txt")) === "kept", "file kept across the drain");
    const pid2 = (await moved.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
    check(pid2 === pid, `process kept across the drain (${pid} -> ${pid2})`);
    step(`resumed on ${now} with its file and process`);
  }
} finally {
  await Sandbox.kill(sbx.sandboxId, opts);
  step("killed");
}
console.log("smoke: ok");
