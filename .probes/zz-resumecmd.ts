// Repro: upload, pause, resume (API connect), then a fresh SDK connect + background command + wait.
import { Sandbox } from "e2b";
import { startServer, useE2b } from "../test/helpers/server.js";

const N = Number(process.env.N ?? 15);
const server = await startServer({ env: { AENV_NET_PREFIX: "aey", AENV_SLOT_CIDR: "10.214.0.0/16", AENV_LOG_LEVEL: "debug" } });
useE2b(server);
let bad = 0;
try {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  await s.files.write("/home/user/dir/up.bin", new Uint8Array(70_000).fill(7));
  for (let i = 0; i < N; i++) {
    await s.pause();
    const r = await fetch(`${server.url}/sandboxes/${s.sandboxId}/connect`, { method: "POST", headers: { "X-API-Key": server.apiKey, "content-type": "application/json" }, body: "{}" });
    if (!r.ok) console.log("connect", r.status, await r.text());
    const c = await Sandbox.connect(s.sandboxId);
    let out = ""; let err = "";
    const h = await c.commands.run("cat /home/user/dir/up.bin | wc -c", { background: true, timeoutMs: 0, onStdout: (d) => void (out += d), onStderr: (d) => void (err += d) });
    let code: number;
    try { code = (await h.wait()).exitCode; } catch (e) { code = (e as { exitCode?: number }).exitCode ?? -99; err += ` THROW ${(e as Error).message}`; }
    const okk = code === 0 && out.trim() === "70000";
    if (!okk) bad++;
    console.log(i, okk ? "ok" : `BAD code=${code} out=${JSON.stringify(out)} err=${JSON.stringify(err)}`);
  }
  await s.kill();
} finally {
  console.log("bad", bad);
  if (bad) console.log(server.logs().split("\n").filter((l) => /warn|error|spawn|process/i.test(l)).slice(-60).join("\n"));
  await server.stop();
}
