import { writeFileSync } from "node:fs";
import { cliRunner } from "../test/helpers/cli.js";
import { startServer } from "../test/helpers/server.js";

const N = Number(process.env.N ?? 10);
const server = await startServer({ env: { AENV_NET_PREFIX: "aey", AENV_SLOT_CIDR: "10.214.0.0/16", AENV_LOG_LEVEL: "debug" } });
const { aenv, ok } = cliRunner(() => ({ ...process.env, AENV_API_URL: server.url, AENV_API_KEY: server.apiKey, E2B_API_URL: server.url, E2B_API_KEY: server.apiKey }));
let bad = 0;
try {
  const st = await ok("start", "--detach", "--env", "GREETING=hello");
  const id = (JSON.parse(st.stdout) as { sandboxID: string }).sandboxID;
  writeFileSync("/tmp/up.bin", Buffer.alloc(70000, 7));
  await ok("upload", id, "/tmp/up.bin", "/home/user/dir/up.bin");
  for (let i = 0; i < N; i++) {
    await ok("pause", id);
    await ok("resume", id);
    const r = await aenv("exec", id, "--", "cat /home/user/dir/up.bin | wc -c");
    const good = r.code === 0 && r.stdout.trim() === "70000";
    if (!good) bad++;
    console.log(i, good ? "ok" : `BAD ${JSON.stringify(r)}`);
  }
  await ok("rm", id);
} catch (e) { console.log("ERR", e); } finally {
  console.log("bad", bad);
  if (bad) console.log(server.logs().split("\n").filter((l) => /warn|error|spawn|"process/i.test(l)).slice(-80).join("\n"));
  await server.stop();
}
