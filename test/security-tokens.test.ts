// Credentials that open a sandbox never enter it: a fork child restores its parent's memory,
// so whatever the parent's processes held, the child can read (root there reads any
// process's /proc/PID/mem). The child must find nothing in it that opens the parent.
import assert from "node:assert/strict";
import { get as httpGet } from "node:http";
import { describe, test } from "node:test";
import { Sandbox } from "e2b";
import { envdHostToken } from "../packages/server/src/orchestrator/envd-credentials.js";
import { serverForFile } from "./helpers/server.js";

const srv = serverForFile();

/**
 * Searches every process's readable memory in the sandbox for `needle`. The needle is handed
 * over reversed (and re-reversed only inside the scanner, whose own memory is skipped), so
 * asking does not itself put it into envd's memory.
 */
const SCANNER = `
import os, sys
needle = sys.argv[1][::-1].encode()
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    for line in maps:
        addr, perms = line.split()[:2]
        if "r" not in perms:
            continue
        a, b = (int(x, 16) for x in addr.split("-"))
        if b - a > 1 << 28:
            continue
        try:
            mem.seek(a)
            data = mem.read(b - a)
        except (OSError, ValueError, OverflowError):
            continue
        if data and needle in data:
            found.append(open(f"/proc/{pid}/comm").read().strip() + "/" + pid)
            break
print(" ".join(found) or "absent")
`;

async function scan(s: Sandbox, needle: string): Promise<string> {
  await s.files.write("/tmp/scan.py", SCANNER);
  const r = await s.commands.run(`python3 /tmp/scan.py ${[...needle].reverse().join("")}`, {
    user: "root",
    timeoutMs: 120_000,
  });
  return r.stdout.trim();
}

/** An envd call on `id` through the proxy with a given access token. */
async function envdCall(id: string, token: string): Promise<number> {
  const r = await fetch(`${srv().url}/filesystem.Filesystem/Stat`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "e2b-sandbox-id": id,
      "e2b-sandbox-port": "49983",
      "x-access-token": token,
    },
    body: JSON.stringify({ path: "/home/user" }),
  });
  await r.arrayBuffer();
  return r.status;
}

const tokenOf = (s: Sandbox) => (s as unknown as { envdAccessToken: string }).envdAccessToken;

describe("envd credentials and forks", () => {
  test("a fork child finds nothing in its memory that opens its parent", async () => {
    const parent = await Sandbox.create({ timeoutMs: 180_000 });
    let child: Sandbox | undefined;
    try {
      const parentToken = tokenOf(parent);
      assert.ok(parentToken, "the SDK got an envd access token");
      // The parent is used through the proxy as any client would, then forked.
      await parent.files.write("/home/user/parent.txt", "parent's");
      await parent.commands.run("true");
      const forked = (await parent.fork({ count: 1 } as never)) as unknown as Sandbox[];
      child = forked[0] as Sandbox;
      assert.ok(child instanceof Sandbox);

      // The client tokens never entered either sandbox.
      assert.equal(await scan(child, parentToken), "absent", "the parent's client token is in the child's memory");
      assert.equal(await scan(parent, parentToken), "absent", "the parent's client token is in its own memory");
      assert.equal(await scan(child, tokenOf(child)), "absent", "the child's client token is in its memory");

      // What the child does hold (its parent's host token, from the restored envd) is refused
      // for the parent through the proxy; the parent's own client keeps working.
      assert.equal(await envdCall(parent.sandboxId, envdHostToken(parentToken)), 401);
      assert.equal(await envdCall(parent.sandboxId, tokenOf(child)), 401);
      assert.equal(await envdCall(parent.sandboxId, parentToken), 200);
      assert.equal(await parent.files.read("/home/user/parent.txt"), "parent's");
      assert.equal(await child.files.read("/home/user/parent.txt"), "parent's");
      // Signed URLs made with the client token still work (the proxy checks them now).
      const url = await parent.downloadUrl("/home/user/parent.txt");
      const got = await fetch(url);
      assert.equal(got.status, 200);
      assert.equal(await got.text(), "parent's");
      const forged = await fetch(
        url.replace(/signature=[^&]+/, "signature=v1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
      );
      assert.ok(forged.status === 401 || forged.status === 403, `forged signature answered ${forged.status}`);
    } finally {
      await child?.kill().catch(() => {});
      await parent.kill();
    }
  });

  test("a sandbox started from a snapshot cannot open the snapshot's source", async () => {
    const src = await Sandbox.create({ timeoutMs: 180_000 });
    try {
      await src.commands.run("true");
      const snap = await src.createSnapshot({} as never);
      const started = await Sandbox.create(snap.snapshotId);
      try {
        assert.equal(await scan(started, tokenOf(src)), "absent", "the source's client token is in the start's memory");
        assert.equal(await envdCall(src.sandboxId, envdHostToken(tokenOf(src))), 401);
        assert.equal((await started.commands.run("echo ok")).stdout, "ok\n");
      } finally {
        await started.kill();
      }
    } finally {
      await src.kill();
    }
  });
});

describe("sandbox content and the server's origin", () => {
  test("on the server's origin a sandbox page is an opaque origin: no origin-wide headers, no service worker script, no cookies in", async () => {
    const s = await Sandbox.create();
    try {
      const app = [
        "from http.server import BaseHTTPRequestHandler, HTTPServer",
        "class H(BaseHTTPRequestHandler):",
        "    def do_GET(self):",
        "        self.send_response(200)",
        "        self.send_header('Content-Type', 'text/html')",
        "        self.send_header('Service-Worker-Allowed', '/')",
        "        self.send_header('Set-Cookie', 'k=v; Path=/')",
        "        self.send_header('Clear-Site-Data', '\"storage\"')",
        "        self.send_header('Cross-Origin-Opener-Policy', 'unsafe-none')",
        "        self.end_headers()",
        "        self.wfile.write(('cookie=' + str(self.headers.get('Cookie'))).encode())",
        "HTTPServer(('0.0.0.0', 8002), H).serve_forever()",
      ].join("\n");
      await s.files.write("/tmp/app.py", app);
      await s.commands.run("python3 /tmp/app.py", { background: true });
      const get = async (url: string, headers: Record<string, string> = {}) => {
        for (let i = 0; ; i++) {
          try {
            const r = await fetch(url, { headers });
            if (r.status !== 502 || i > 50) return r;
          } catch (err) {
            if (i > 50) throw err;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      };
      const base = srv().url;
      const shared = await get(`${base}/proxy/${s.sandboxId}/8002/`, { cookie: "dashboard=secret" });
      assert.equal(shared.status, 200);
      assert.equal(await shared.text(), "cookie=None", "the origin's cookies never reach the sandbox");
      for (const h of ["service-worker-allowed", "set-cookie", "clear-site-data", "cross-origin-opener-policy"]) {
        assert.equal(shared.headers.get(h), null, h);
      }
      assert.match(shared.headers.get("content-security-policy") ?? "", /^sandbox /);
      assert.doesNotMatch(shared.headers.get("content-security-policy") ?? "", /allow-same-origin/);
      const sw = await get(`${base}/proxy/${s.sandboxId}/8002/sw.js`, { "service-worker": "script" });
      assert.equal(sw.status, 403);
      // The sandbox's own host is its own origin: passed as the sandbox sent it.
      const own = await new Promise<{ status?: number; headers: Record<string, unknown>; body: string }>((ok, fail) => {
        const r = httpGet(
          `${base}/`,
          { headers: { host: `8002-${s.sandboxId}.${srv().domain}`, cookie: "app=1" } },
          (res) => {
            let body = "";
            res.on("data", (d: Buffer) => (body += d.toString()));
            res.on("end", () => ok({ status: res.statusCode, headers: res.headers, body }));
          },
        );
        r.on("error", fail);
      });
      assert.equal(own.status, 200);
      assert.equal(own.body, "cookie=app=1");
      assert.equal(own.headers["service-worker-allowed"], "/");
      assert.equal(own.headers["content-security-policy"], undefined);
    } finally {
      await s.kill();
    }
  });
});
