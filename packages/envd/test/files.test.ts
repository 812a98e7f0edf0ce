/** Filesystem service and /files through the real e2b SDK (plus a few raw HTTP checks). */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { lstatSync, mkdirSync, readFileSync, statSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { Filesystem, filesystemPb } from "@aenv/protocol";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import {
  FileNotFoundError,
  FilesystemEventType,
  FileType,
  getSignature,
  InvalidArgumentError,
  type Sandbox,
} from "e2b";
import { type Harness, needsRoot, sleep, startHarness, TOKEN, until } from "./helpers.js";

/** Runs one Python expression on the path `p` (Node has no xattr API); its printed result. */
function xattr(expr: string, p: string): string {
  return execFileSync("python3", ["-c", `import os, sys; p = sys.argv[1]; print(${expr})`, p], {
    encoding: "utf8",
  }).trim();
}

describe("envd filesystem and HTTP routes (e2b SDK)", { skip: needsRoot }, () => {
  let h: Harness;
  let sbx: Sandbox;

  before(async () => {
    h = await startHarness();
    sbx = await h.connect();
  });
  after(async () => {
    await h?.close();
  });

  describe("files", () => {
    it("write/read text and binary; ownership; relative paths", async () => {
      const p = path.join(h.workdir, "a.txt");
      const info = await sbx.files.write(p, "hello world");
      assert.equal(info.path, p);
      assert.equal(info.name, "a.txt");
      assert.equal(await sbx.files.read(p), "hello world");
      assert.equal(statSync(p).uid, 1000);

      const bin = new Uint8Array(256).map((_, i) => i);
      await sbx.files.write(path.join(h.workdir, "bin.dat"), bin.buffer);
      const back = await sbx.files.read(path.join(h.workdir, "bin.dat"), { format: "bytes" });
      assert.deepEqual(Buffer.from(back), Buffer.from(bin));

      // multi-file write: absolute + relative (→ the user's home), new parent dirs owned by the user
      const res = await sbx.files.write([
        { path: path.join(h.workdir, "b.txt"), data: "B" },
        { path: "rel/dir/c.txt", data: "C" },
      ]);
      assert.deepEqual(
        res.map((r) => r.path),
        [path.join(h.workdir, "b.txt"), path.join(h.home, "rel/dir/c.txt")],
      );
      assert.equal(readFileSync(path.join(h.home, "rel/dir/c.txt"), "utf8"), "C");
      assert.equal(statSync(path.join(h.home, "rel")).uid, 1000);
      assert.equal(await sbx.files.read("rel/dir/c.txt"), "C");
      assert.equal(await sbx.files.read("~/rel/dir/c.txt"), "C");

      // as root: owned by root, relative to root's home
      await sbx.files.write("r.txt", "R", { user: "root" });
      assert.equal(statSync(path.join(h.rootHome, "r.txt")).uid, 0);
      // empty file
      await sbx.files.write(path.join(h.workdir, "empty"), "");
      assert.equal(await sbx.files.read(path.join(h.workdir, "empty")), "");

      assert.match(await sbx.files.read("/proc/self/status", { user: "root" }), /^Name:/);
      await assert.rejects(sbx.files.read(path.join(h.workdir, "missing")), FileNotFoundError);
      await assert.rejects(sbx.files.read(h.workdir), InvalidArgumentError);
    });

    it("octet-stream, gzip and metadata", async () => {
      const p = path.join(h.workdir, "o.txt");
      await sbx.files.write(p, "octet", { useOctetStream: true });
      assert.equal(readFileSync(p, "utf8"), "octet");
      const g = path.join(h.workdir, "sub/g.txt");
      await sbx.files.write(g, "gzipped ".repeat(100), { gzip: true });
      assert.equal(readFileSync(g, "utf8"), "gzipped ".repeat(100));

      const m = path.join(h.workdir, "m.txt");
      const w = await sbx.files.write(m, "meta", { metadata: { Owner: "me", Kind: "test" }, useOctetStream: true });
      assert.deepEqual(w.metadata, { owner: "me", kind: "test" });
      assert.deepEqual((await sbx.files.getInfo(m)).metadata, { owner: "me", kind: "test" });
      await sbx.files.rename(m, path.join(h.workdir, "m2.txt"));
      assert.deepEqual((await sbx.files.getInfo(path.join(h.workdir, "m2.txt"))).metadata, {
        owner: "me",
        kind: "test",
      });
      // Real xattrs: in-sandbox tools see them, and one set out of band is read back.
      const m2 = path.join(h.workdir, "m2.txt");
      assert.equal(xattr(`os.getxattr(p, "user.e2b.owner").decode()`, m2), "me");
      xattr(`os.setxattr(p, "user.e2b.tag", "blue".encode())`, m2);
      assert.deepEqual((await sbx.files.getInfo(m2)).metadata, { owner: "me", kind: "test", tag: "blue" });
      // a re-upload without metadata replaces the set
      await sbx.files.write(path.join(h.workdir, "m2.txt"), "again");
      assert.equal((await sbx.files.getInfo(path.join(h.workdir, "m2.txt"))).metadata, undefined);
    });

    it("getInfo, exists, list with depth, symlinks", async () => {
      const d = path.join(h.workdir, "tree");
      mkdirSync(path.join(d, "x/y"), { recursive: true });
      writeFileSync(path.join(d, "f.txt"), "12345");
      writeFileSync(path.join(d, "x/y/deep.txt"), "deep");
      symlinkSync(path.join(d, "x"), path.join(d, "link"));

      const info = await sbx.files.getInfo(path.join(d, "f.txt"));
      assert.equal(info.type, FileType.FILE);
      assert.equal(info.size, 5);
      assert.equal(info.permissions, "-rw-r--r--");
      assert.equal(info.mode, 0o644);
      assert.equal(info.owner, "root");
      assert.ok(info.modifiedTime instanceof Date);
      const dirInfo = await sbx.files.getInfo(d);
      assert.equal(dirInfo.type, FileType.DIR);
      assert.equal(dirInfo.permissions, "drwxr-xr-x");
      // As E2B's envd: a link has the type (and mode) of what it resolves to, and its target;
      // one that resolves to nothing names itself and has no type.
      const link = await sbx.files.getInfo(path.join(d, "link"));
      assert.equal(link.type, FileType.DIR);
      assert.equal(link.symlinkTarget, path.join(d, "x"));
      assert.equal(link.permissions, "Lrwxrwxrwx");
      assert.equal(link.mode, 0o755);
      symlinkSync(path.join(d, "f.txt"), path.join(d, "to-file"));
      const toFile = await sbx.files.getInfo(path.join(d, "to-file"));
      assert.deepEqual([toFile.type, toFile.symlinkTarget, toFile.mode], [FileType.FILE, path.join(d, "f.txt"), 0o644]);
      symlinkSync(path.join(d, "gone"), path.join(d, "dangling"));
      const dangling = await sbx.files.getInfo(path.join(d, "dangling"));
      assert.deepEqual([dangling.type, dangling.symlinkTarget], [undefined, path.join(d, "dangling")]);
      const listed = await sbx.files.list(d);
      assert.equal(listed.find((e) => e.name === "to-file")?.type, FileType.FILE);
      unlinkSync(path.join(d, "to-file"));
      unlinkSync(path.join(d, "dangling"));

      assert.equal(await sbx.files.exists(path.join(d, "f.txt")), true);
      assert.equal(await sbx.files.exists(path.join(d, "nope")), false);

      const l1 = await sbx.files.list(d);
      assert.deepEqual(
        l1.map((e) => e.name),
        ["f.txt", "link", "x"],
      );
      const l3 = await sbx.files.list(d, { depth: 3 });
      assert.deepEqual(
        l3.map((e) => path.relative(d, e.path)),
        ["f.txt", "link", "x", "x/y", "x/y/deep.txt"],
        "symlinks are not followed",
      );
      await assert.rejects(sbx.files.list(path.join(d, "nope")), FileNotFoundError);
      await assert.rejects(sbx.files.list(path.join(d, "f.txt")), InvalidArgumentError);
    });

    it("makeDir, rename, remove", async () => {
      const d = path.join(h.workdir, "made/a/b");
      assert.equal(await sbx.files.makeDir(d), true);
      assert.equal(await sbx.files.makeDir(d), false);
      assert.equal(statSync(path.join(h.workdir, "made")).uid, 1000);
      writeFileSync(path.join(h.workdir, "plain"), "x");
      await assert.rejects(sbx.files.makeDir(path.join(h.workdir, "plain")), InvalidArgumentError);

      const moved = await sbx.files.rename(path.join(h.workdir, "plain"), path.join(h.workdir, "new/parent/plain2"));
      assert.equal(moved.path, path.join(h.workdir, "new/parent/plain2"));
      assert.equal(moved.type, FileType.FILE);
      await assert.rejects(
        sbx.files.rename(path.join(h.workdir, "plain"), path.join(h.workdir, "zz")),
        FileNotFoundError,
      );

      await sbx.files.remove(path.join(h.workdir, "made"));
      assert.equal(await sbx.files.exists(path.join(h.workdir, "made")), false);
      await sbx.files.remove(path.join(h.workdir, "made")); // missing is fine
    });

    it("watchDir reports create/write/remove/rename with relative names", async () => {
      const d = path.join(h.workdir, "watched");
      mkdirSync(d);
      const events: { name: string; type: FilesystemEventType }[] = [];
      const handle = await sbx.files.watchDir(d, (e) => void events.push({ name: e.name, type: e.type }), {
        recursive: true,
        timeoutMs: 0,
      });
      await sbx.files.write(path.join(d, "one.txt"), "1");
      mkdirSync(path.join(d, "sub"));
      await sleep(100);
      writeFileSync(path.join(d, "sub/two.txt"), "2");
      await sleep(100);
      await sbx.files.rename(path.join(d, "sub/two.txt"), path.join(d, "sub/three.txt"));
      await sbx.files.remove(path.join(d, "one.txt"));
      const has = (name: string, type: FilesystemEventType) => events.some((e) => e.name === name && e.type === type);
      await until(
        () =>
          has("sub", FilesystemEventType.CREATE) &&
          has("sub/two.txt", FilesystemEventType.CREATE) &&
          has("sub/two.txt", FilesystemEventType.WRITE) &&
          has("sub/two.txt", FilesystemEventType.RENAME) &&
          has("sub/three.txt", FilesystemEventType.CREATE) &&
          has("one.txt", FilesystemEventType.REMOVE),
        4000,
        `watch events (got ${JSON.stringify(events)})`,
      ).catch((e) => {
        throw new Error(`${(e as Error).message}: ${JSON.stringify(events)}`);
      });
      await handle.stop();
      if (process.env.ENVD_TEST_VERBOSE) console.log(JSON.stringify(events));
      // an upload writes in place, then owns the file to the user, as E2B's envd
      assert.deepEqual(
        events.filter((e) => e.name === "one.txt").map((e) => e.type),
        [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE, FilesystemEventType.REMOVE],
      );

      // includeEntry + deadline ends the stream
      let exited: Error | undefined | null = null;
      const entries: unknown[] = [];
      await sbx.files.watchDir(d, (e) => void entries.push(e.entry), {
        includeEntry: true,
        timeoutMs: 1200,
        onExit: (err) => {
          exited = err ?? undefined;
        },
      });
      writeFileSync(path.join(d, "four.txt"), "4");
      // A link's entry is E2B's, as Stat gives it: the type of its target, the target named.
      symlinkSync(path.join(d, "four.txt"), path.join(d, "four-link"));
      const named = (n: string) => entries.find((e) => (e as { name?: string } | undefined)?.name === n);
      await until(() => !!named("four.txt"), 3000, "entry");
      await until(() => !!named("four-link"), 3000, "the link's entry");
      const link = named("four-link") as { type?: unknown; symlinkTarget?: unknown; path?: unknown };
      assert.deepEqual(
        [link.type, link.symlinkTarget, link.path],
        [FileType.FILE, path.join(d, "four.txt"), path.join(d, "four-link")],
      );
      await until(() => exited !== null, 4000, "watch end at deadline");
      if (process.env.ENVD_TEST_VERBOSE) console.log("watch exit:", String(exited));

      await assert.rejects(
        sbx.files.watchDir(path.join(d, "nope"), () => {}),
        FileNotFoundError,
      );
    });

    // Binary here (as the Python SDK sends it): the SDK's own calls above are JSON.
    it("polling watchers (binary Connect codec)", async () => {
      const transport = createConnectTransport({
        baseUrl: h.envdUrl,
        httpVersion: "1.1",
        useBinaryFormat: true,
        interceptors: [
          (next) => (req) => {
            req.header.set("x-access-token", TOKEN);
            return next(req);
          },
        ],
      });
      const fs = createClient(Filesystem, transport);
      const d = path.join(h.workdir, "polled");
      mkdirSync(d);
      const { watcherId } = await fs.createWatcher({ path: d, recursive: true });
      writeFileSync(path.join(d, "p.txt"), "p");
      const events = await until(async () => {
        const r = await fs.getWatcherEvents({ watcherId });
        return r.events.length > 0 ? r.events : undefined;
      });
      assert.equal(events[0]?.name, "p.txt");
      assert.equal(events[0]?.type, filesystemPb.EventType.CREATE);
      await fs.removeWatcher({ watcherId });
      await assert.rejects(fs.getWatcherEvents({ watcherId }), /not found/);
      await assert.rejects(fs.createWatcher({ path: path.join(d, "p.txt") }), /not a directory/);
    });

    it("signed upload/download URLs", async () => {
      const p = path.join(h.workdir, "signed.txt");
      const up = await sbx.uploadUrl(p, { useSignatureExpiration: 60 });
      const form = new FormData();
      form.append("file", new Blob(["signed!"]), p);
      const r1 = await fetch(up, { method: "POST", body: form });
      assert.equal(r1.status, 200, await r1.clone().text());
      assert.equal(readFileSync(p, "utf8"), "signed!");
      const down = await sbx.downloadUrl(p, { user: "root" });
      const r2 = await fetch(down);
      assert.equal(r2.status, 200);
      assert.equal(await r2.text(), "signed!");

      const tampered = new URL(down);
      tampered.searchParams.set("path", path.join(h.workdir, "a.txt"));
      assert.equal((await fetch(tampered)).status, 401);
      const wrongOp = new URL(up);
      assert.equal((await fetch(wrongOp)).status, 401, "write signature does not allow reads");

      const expired = await getSignature({
        path: p,
        operation: "read",
        user: undefined,
        expirationInSeconds: -10,
        envdAccessToken: TOKEN,
      });
      const u = new URL(`${h.envdUrl}/files`);
      u.searchParams.set("path", p);
      u.searchParams.set("signature", expired.signature);
      u.searchParams.set("signature_expiration", String(expired.expiration));
      const r3 = await fetch(u);
      assert.equal(r3.status, 401);
      assert.deepEqual(Object.keys(await r3.json()).sort(), ["code", "message"]);
    });

    it("raw /files errors", async () => {
      const hdr = { "x-access-token": TOKEN };
      const missing = await fetch(`${h.envdUrl}/files?path=/nope/x`, { headers: hdr });
      assert.equal(missing.status, 404);
      assert.deepEqual(await missing.json(), { code: 404, message: "path '/nope/x' does not exist" });
      const badUser = await fetch(`${h.envdUrl}/files?path=/etc/hostname&username=ghost`, { headers: hdr });
      assert.equal(badUser.status, 401);
      const badType = await fetch(`${h.envdUrl}/files?path=${h.workdir}/t`, {
        method: "POST",
        headers: { ...hdr, "content-type": "text/plain" },
        body: "x",
      });
      assert.equal(badType.status, 400);
      const noPath = await fetch(`${h.envdUrl}/files`, {
        method: "POST",
        headers: { ...hdr, "content-type": "application/octet-stream" },
        body: "x",
      });
      assert.equal(noPath.status, 400);
      const form = new FormData();
      form.append("file", new Blob(["1"]), `${h.workdir}/dup.txt`);
      form.append("file", new Blob(["2"]), `${h.workdir}/dup.txt`);
      const dup = await fetch(`${h.envdUrl}/files`, { method: "POST", headers: hdr, body: form });
      assert.equal(dup.status, 400);
      const badGzip = await fetch(`${h.envdUrl}/files?path=${h.workdir}/bad.gz.txt`, {
        method: "POST",
        headers: { ...hdr, "content-type": "application/octet-stream", "content-encoding": "gzip" },
        body: "not gzip at all",
      });
      assert.equal(badGzip.status, 400);
      assert.throws(() => lstatSync(`${h.workdir}/bad.gz.txt`), "no half-written file");
      const good = await fetch(`${h.envdUrl}/files?path=${h.workdir}/good.gz.txt`, {
        method: "POST",
        headers: { ...hdr, "content-type": "application/octet-stream", "content-encoding": "gzip" },
        body: gzipSync("zipped"),
      });
      assert.equal(good.status, 200);
      assert.deepEqual(await good.json(), [{ path: `${h.workdir}/good.gz.txt`, name: "good.gz.txt", type: "file" }]);
      const noTok = await fetch(`${h.envdUrl}/files?path=${h.workdir}/good.gz.txt`);
      assert.equal(noTok.status, 401);
    });
  });

  describe("compose", () => {
    it("concatenates the parts in order into a file of the user's, then removes them", async () => {
      const hdr = { "x-access-token": TOKEN, "content-type": "application/json" };
      const parts = ["p0", "p1", "p2"].map((n) => path.join(h.workdir, "parts", n));
      await sbx.files.write(parts.map((p, i) => ({ path: p, data: `part ${i};` })));
      const compose = (body: unknown, headers: Record<string, string> = hdr) =>
        fetch(`${h.envdUrl}/files/compose`, { method: "POST", headers, body: JSON.stringify(body) });
      const dest = path.join(h.workdir, "joined", "all.txt");
      const r = await compose({ destination: dest, source_paths: parts });
      assert.equal(r.status, 200);
      assert.deepEqual(await r.json(), { path: dest, name: "all.txt", type: "file" });
      assert.equal(readFileSync(dest, "utf8"), "part 0;part 1;part 2;");
      assert.equal(statSync(dest).uid, 1000, "owned by the user");
      for (const p of parts) assert.throws(() => lstatSync(p), `${p} removed`);

      assert.equal((await compose({ destination: dest, source_paths: parts }, {})).status, 401, "no token");
      assert.equal((await compose({ destination: dest, source_paths: [parts[0]] })).status, 404, "a missing part");
      writeFileSync(path.join(h.workdir, "real.txt"), "secret");
      symlinkSync(path.join(h.workdir, "real.txt"), path.join(h.workdir, "link.txt"));
      const viaLink = await compose({ destination: `${dest}.2`, source_paths: [path.join(h.workdir, "link.txt")] });
      assert.equal(viaLink.status, 400, "a part that is a symlink is not followed");
      assert.throws(() => lstatSync(`${dest}.2`), "nothing written for a refused compose");
      const self = await compose({ destination: dest, source_paths: [dest] });
      assert.equal(self.status, 400, "the destination as a part");
      assert.equal(readFileSync(dest, "utf8"), "part 0;part 1;part 2;", "left as it was");
      assert.equal((await compose({ destination: dest, source_paths: [] })).status, 400);
      assert.equal((await compose({ destination: dest, source_paths: [h.workdir] })).status, 400, "a directory");
    });
  });

  describe("http routes", () => {
    it("health, init, envs, metrics", async () => {
      assert.equal((await fetch(`${h.envdUrl}/health`)).status, 204);
      const unauth = await fetch(`${h.envdUrl}/init`, {
        method: "POST",
        body: JSON.stringify({ envVars: { B: "2" } }),
      });
      assert.equal(unauth.status, 401);
      const ok = await fetch(`${h.envdUrl}/init`, {
        method: "POST",
        headers: { "x-access-token": TOKEN },
        body: JSON.stringify({ envVars: { B: "2" }, timestamp: "2000-01-01T00:00:00Z" }),
      });
      assert.equal(ok.status, 204);
      const envs = await fetch(`${h.envdUrl}/envs`, { headers: { "x-access-token": TOKEN } });
      assert.deepEqual(await envs.json(), { SANDBOX_VAR: "sbx", B: "2" });
      assert.equal((await fetch(`${h.envdUrl}/envs`)).status, 401);
      const metrics = (await (
        await fetch(`${h.envdUrl}/metrics`, { headers: { "x-access-token": TOKEN } })
      ).json()) as Record<string, number>;
      for (const k of [
        "ts",
        "cpu_count",
        "cpu_used_pct",
        "mem_total",
        "mem_used",
        "mem_cache",
        "mem_total_mib",
        "mem_used_mib",
        "disk_used",
        "disk_total",
      ]) {
        assert.equal(typeof metrics[k], "number", k);
      }
      assert.ok((metrics.mem_total ?? 0) > 0);
    });

    it("connect errors use string codes", async () => {
      const r = await fetch(`${h.envdUrl}/process.Process/SendSignal`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "x-access-token": TOKEN },
        body: JSON.stringify({ process: { pid: 999999 }, signal: "SIGNAL_SIGKILL" }),
      });
      assert.equal(r.status, 404);
      assert.deepEqual(await r.json(), { code: "not_found", message: "process with pid 999999 not found" });
      const u = await fetch(`${h.envdUrl}/filesystem.Filesystem/Stat`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Basic ${Buffer.from("ghost:").toString("base64")}`,
          "x-access-token": TOKEN,
        },
        body: JSON.stringify({ path: "/" }),
      });
      assert.equal(u.status, 401);
      assert.deepEqual(await u.json(), { code: "unauthenticated", message: "invalid username: 'ghost'" });
    });
  });
});
