/** Test harness: the built envd on a random loopback port, a fake control plane, an SDK sandbox. */

import { spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type net from "node:net";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { Sandbox } from "e2b";

export const TOKEN = "test-token-123";

/** envd (Go, built by `npm run build` where Go is installed). */
export const ENVD = path.resolve(import.meta.dirname, "..", "dist", "envd-native");

/** Starts envd on a free loopback port; resolves with its port and a stop function. */
async function startEnvd(etc: string): Promise<{ port: number; stop: () => Promise<void> }> {
  const child = spawn(ENVD, ["--host", "127.0.0.1", "--port", "0", "--etc", etc], {
    stdio: ["ignore", "inherit", "pipe"],
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const port = await new Promise<number>((resolve, reject) => {
    let seen = "";
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`envd exited with ${code}: ${seen}`)));
    child.stderr.on("data", (d: Buffer) => {
      if (seen.length < 65536) seen += d.toString();
      const m = /listening on [^\s]*:(\d+)/.exec(seen);
      if (m?.[1]) resolve(Number(m[1]));
    });
  });
  child.stderr.on("data", (d: Buffer) => process.stderr.write(d));
  return {
    port,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** These tests chown files and switch users: they need root. */
export const needsRoot: false | string =
  process.getuid?.() !== 0 ? "envd tests need root" : !existsSync(ENVD) ? "envd is not built (no Go)" : false;

export interface Harness {
  root: string;
  etc: string;
  home: string; // /home/user equivalent (uid 1000)
  rootHome: string;
  workdir: string;
  envdUrl: string;
  apiUrl: string;
  connect(opts?: { token?: string }): Promise<Sandbox>;
  close(): Promise<void>;
}

function listen(server: net.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)));
}

/** A fake root with its own passwd/group: `user` (1000), `root` and `nobody`, homes under the temp dir. */
export async function startHarness(): Promise<Harness> {
  const root = mkdtempSync(path.join(os.tmpdir(), "envd-test-"));
  chmodSync(root, 0o755);
  const etc = path.join(root, "etc");
  const home = path.join(root, "home", "user");
  const rootHome = path.join(root, "root");
  const nobodyHome = path.join(root, "nobody");
  const workdir = path.join(root, "work");
  for (const d of [etc, home, rootHome, nobodyHome, workdir]) mkdirSync(d, { recursive: true, mode: 0o755 });
  chownSync(home, 1000, 1000);
  chownSync(workdir, 1000, 1000);
  chownSync(nobodyHome, 65534, 65534);
  writeFileSync(
    path.join(etc, "passwd"),
    [
      `root:x:0:0:root:${rootHome}:/bin/bash`,
      `nobody:x:65534:65534:nobody:${nobodyHome}:/usr/sbin/nologin`,
      `user:x:1000:1000::${home}:/bin/bash`,
      "",
    ].join("\n"),
  );
  writeFileSync(path.join(etc, "group"), ["root:x:0:", "nogroup:x:65534:", "user:x:1000:", ""].join("\n"));

  const envd = await startEnvd(etc);
  const envdUrl = `http://127.0.0.1:${envd.port}`;

  // POST /init as the host would
  const init = await fetch(`${envdUrl}/init`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ accessToken: TOKEN, envVars: { SANDBOX_VAR: "sbx" }, defaultWorkdir: workdir }),
  });
  if (init.status !== 204) throw new Error(`init failed: ${init.status}`);

  let currentToken = TOKEN;
  const api = http.createServer((req, res) => {
    const m = /^\/v2\/sandboxes\/([^/]+)\/connect$/.exec(req.url ?? "");
    req.resume();
    if (req.method === "POST" && m) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          sandboxID: m[1],
          templateID: "base",
          clientID: "test",
          envdVersion: "0.6.4",
          envdAccessToken: currentToken,
          domain: null,
        }),
      );
      return;
    }
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: 404, message: "not found" }));
  });
  const apiPort = await listen(api);
  const apiUrl = `http://127.0.0.1:${apiPort}`;

  const sandboxes: Sandbox[] = [];
  return {
    root,
    etc,
    home,
    rootHome,
    workdir,
    envdUrl,
    apiUrl,
    async connect(opts = {}) {
      currentToken = opts.token ?? TOKEN;
      const sbx = await Sandbox.connect("itest0000000000000000", { apiKey: "x", apiUrl, sandboxUrl: envdUrl });
      sandboxes.push(sbx);
      return sbx;
    },
    async close() {
      api.closeAllConnections();
      await Promise.all([envd.stop(), new Promise((r) => api.close(r))]);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Poll `fn` until it returns truthy (or throw after `ms`). */
export async function until<T>(fn: () => T | Promise<T>, ms = 3000, what = "condition"): Promise<NonNullable<T>> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}
