// A sandbox killed while a command streams its output: the client's stream must end in an
// error (a cut connection), never a clean end of the body. E2B's Python SDK checks the
// sandbox's health only after a reset or an error, and then says "sandbox was killed"; a clean
// end mid-body reads as a protocol error instead.
import assert from "node:assert/strict";
import { request } from "node:http";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { serverForFile } from "./helpers/server.js";

const srv = serverForFile();

test("a kill while a command streams cuts the stream; it never ends cleanly", async () => {
  const s = await Sandbox.create();
  const token = (s as unknown as { envdAccessToken: string }).envdAccessToken;
  const body = JSON.stringify({
    process: { cmd: "/bin/sh", args: ["-c", "while true; do echo tick; sleep 0.2; done"] },
  });
  // One Connect envelope: flags, length, JSON.
  const envelope = Buffer.alloc(5 + Buffer.byteLength(body));
  envelope.writeUInt32BE(Buffer.byteLength(body), 1);
  envelope.write(body, 5);
  const u = new URL(srv().url);
  const outcome = await new Promise<string>((resolve) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        method: "POST",
        path: "/process.Process/Start",
        headers: {
          "content-type": "application/connect+json",
          "connect-protocol-version": "1",
          "e2b-sandbox-id": s.sandboxId,
          "e2b-sandbox-port": "49983",
          "x-access-token": token,
        },
      },
      (res) => {
        let chunks = 0;
        res.on("data", () => {
          if (++chunks === 3) void s.kill();
        });
        res.on("end", () => resolve(res.complete ? "clean end" : "cut"));
        res.on("aborted", () => resolve("cut"));
        res.on("error", () => resolve("cut"));
      },
    );
    req.on("error", () => resolve("cut"));
    req.end(envelope);
  });
  assert.equal(outcome, "cut");
  assert.equal((await srv().api("GET", `/sandboxes/${s.sandboxId}`)).status, 404);
});

test("the SDK reports a command cut by a kill as the sandbox's end, not a network error", async () => {
  const s = await Sandbox.create();
  const cmd = await s.commands.run("sleep 60", { background: true });
  await s.kill();
  const err = await cmd.wait().then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  assert.ok(err, "wait() resolved after a kill");
  assert.equal(err.name, "TimeoutError", String(err));
  assert.match(err.message, /sandbox was killed or reached its end of life/);
});
