import { Sandbox } from "e2b";
import { startServer, useE2b } from "../test/helpers/server.js";
const server = await startServer({ env: { AENV_NET_PREFIX: "aey", AENV_SLOT_CIDR: "10.214.0.0/16", AENV_LOG_LEVEL: "debug", AENV_WARM_POOL_MAX: "0" } });
useE2b(server);
try {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  await s.commands.run(`python3 -c "import os,time; b=[os.urandom(1<<20) for _ in range(10)]; open('/tmp/held','w').close(); time.sleep(1e9)"`, { background: true, timeoutMs: 0 });
  await s.commands.run("while [ ! -e /tmp/held ]; do sleep 0.1; done");
  for (let i = 0; i < 5; i++) {
    let t = performance.now();
    await s.pause();
    const p = performance.now() - t;
    t = performance.now();
    await s.connect();
    const c = performance.now() - t;
    t = performance.now();
    await s.commands.run("true");
    console.log(`pause ${p.toFixed(0)} connect ${c.toFixed(0)} first ${(performance.now() - t).toFixed(0)}`);
  }
  await s.kill();
} finally {
  for (const l of server.logs().split("\n")) if (/"captured"|sandbox paused|sandbox resumed|restored|"steps"/.test(l)) console.log(l.slice(0, 400));
  await server.stop();
}
