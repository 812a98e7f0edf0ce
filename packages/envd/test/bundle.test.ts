/** The esbuild bundle (dist/envd.js) runs standalone; artifact paths resolve. Skipped before `npm run build`. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import { envdArtifacts } from "../src/artifact.js";

const { bundle, nodePtyDir } = envdArtifacts();
const built = existsSync(bundle);

describe("bundle", { skip: built ? false : "dist/envd.js not built" }, () => {
  let child: ReturnType<typeof spawn>;
  let url = "";
  let api: http.Server;
  let apiUrl = "";

  before(async () => {
    child = spawn(process.execPath, [bundle, "--port", "0", "--host", "127.0.0.1"], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    url = await new Promise<string>((resolve, reject) => {
      let buf = "";
      const t = setTimeout(() => reject(new Error(`envd did not start: ${buf}`)), 10_000);
      child.stderr?.on("data", (d: Buffer) => {
        buf += d.toString();
        for (const line of buf.split("\n")) {
          try {
            const rec = JSON.parse(line) as { msg?: string; port?: number };
            if (rec.msg === "envd listening") {
              clearTimeout(t);
              resolve(`http://127.0.0.1:${rec.port}`);
            }
          } catch {
            // partial line
          }
        }
      });
    });
    api = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          sandboxID: "ibundle",
          templateID: "base",
          clientID: "c",
          envdVersion: "0.6.4",
          envdAccessToken: "tok",
          domain: null,
        }),
      );
    });
    await new Promise<void>((r) => api.listen(0, "127.0.0.1", () => r()));
    apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
  });
  after(() => {
    child?.kill("SIGTERM");
    api?.closeAllConnections();
    api?.close();
  });

  it("is ASCII, so V8 holds its source as a one-byte string", () => {
    const src = readFileSync(bundle);
    const at = src.findIndex((b) => b > 0x7f);
    assert.equal(
      at,
      -1,
      `non-ASCII byte at ${at}: ${JSON.stringify(src.subarray(Math.max(0, at - 40), at + 10).toString("latin1"))}`,
    );
  });

  it("artifacts point at real files", () => {
    assert.ok(path.isAbsolute(bundle));
    assert.ok(existsSync(path.join(nodePtyDir, "package.json")));
    assert.ok(existsSync(path.join(nodePtyDir, "lib", "index.js")));
    assert.ok(existsSync(path.join(nodePtyDir, "build", "Release", "pty.node")));
  });

  it("serves health, init, commands and a PTY", async () => {
    assert.equal((await fetch(`${url}/health`)).status, 204);
    const init = await fetch(`${url}/init`, {
      method: "POST",
      body: JSON.stringify({ accessToken: "tok", defaultUser: "root", defaultWorkdir: "/tmp" }),
    });
    assert.equal(init.status, 204);
    const sbx = await Sandbox.connect("ibundle", { apiKey: "x", apiUrl, sandboxUrl: url });
    const r = await sbx.commands.run("echo $USER; pwd");
    assert.equal(r.stdout, "root\n/tmp\n");
    let out = "";
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        out += Buffer.from(d).toString();
      },
    });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo bundled-$((1+1)); exit\n"));
    await term.wait();
    assert.match(out, /bundled-2/);
  });
});
