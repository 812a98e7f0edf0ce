// Can a runsc-paused sandbox be checkpointed (leave-running) and stay paused; then resumed or restored?
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { templateRootfs } from "../bench/paths.js";
import { RawRunsc } from "../bench/raw-runsc.js";

const raw = new RawRunsc({ rootfs: templateRootfs(), overlay: "dir" });
const rs = (args: string[]) => {
  const t = performance.now();
  let out = "";
  try { out = execFileSync("runsc", [`--root=${raw.workDir}/state`, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }); }
  catch (e) { out = `ERR ${(e as { stderr?: string }).stderr ?? e}`; }
  return { ms: +(performance.now() - t).toFixed(1), out: out.trim().slice(0, 200) };
};
const status = (id: string) => (JSON.parse(rs(["state", id]).out) as { status: string }).status;
try {
  const id = raw.newId();
  await raw.start(id);
  await raw.exec(id, ["sh", "-c", `nohup python3 -c "import os,time; b=[os.urandom(1<<20) for _ in range(10)]; open('/tmp/held','w').close(); time.sleep(1e9)" >/dev/null 2>&1 &`]);
  await raw.exec(id, ["sh", "-c", "while [ ! -e /tmp/held ]; do sleep 0.1; done"]);
  await raw.exec(id, ["sh", "-c", "nohup sh -c 'while true; do date +%s%N >> /tmp/ticks; sleep 0.01; done' >/dev/null 2>&1 &"]);
  for (let i = 0; i < 3; i++) {
    const p = rs(["pause", id]);
    const n0 = (await raw.exec(id, ["sh", "-c", "wc -l < /tmp/ticks"]).catch((e) => ({ stdout: String(e) }))).stdout.toString().trim();
    console.log("pause", p, "status", status(id), "exec while paused:", n0.slice(0, 80));
    const img = join(raw.workDir, `img${i}`); mkdirSync(img);
    const c = rs(["checkpoint", "--compression=none", `--image-path=${img}`, "--leave-running", id]);
    console.log("checkpoint of paused", c, "status after", status(id));
    await new Promise((r) => setTimeout(r, 300));
    const r = rs(["resume", id]);
    console.log("resume", r, "status", status(id));
    const t = await raw.exec(id, ["sh", "-c", "wc -l < /tmp/ticks; tail -1 /tmp/ticks"]);
    console.log("after resume", t.stdout.toString().trim().replace("\n", " "));
    const child = raw.newId();
    const t0 = performance.now();
    await raw.restore(child, img);
    const e = await raw.exec(child, ["sh", "-c", "wc -l < /tmp/ticks; ls /tmp/held"]);
    console.log("restore+exec", (performance.now() - t0).toFixed(0), e.stdout.toString().trim().replace("\n", " "));
    await raw.delete(child);
  }
  // Plain checkpoint timing for reference
  for (let i = 0; i < 3; i++) {
    const img = join(raw.workDir, `plain${i}`); mkdirSync(img);
    console.log("plain checkpoint", rs(["checkpoint", "--compression=none", `--image-path=${img}`, "--leave-running", id]).ms);
  }
} finally {
  await raw.cleanup();
}
