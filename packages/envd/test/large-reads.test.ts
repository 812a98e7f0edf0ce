/** envd's listener: connections read in large chunks, HTTP behaviour unchanged. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { largeReadListener } from "../src/http/large-reads.js";

interface Seen {
  chunks: number;
  maxChunk: number;
  sha: string;
}

describe("large-read listener", () => {
  let server: http.Server;
  let listener: net.Server;
  let port = 0;
  const seen: Seen[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      const h = createHash("sha256");
      const s: Seen = { chunks: 0, maxChunk: 0, sha: "" };
      req.on("data", (c: Buffer) => {
        s.chunks++;
        s.maxChunk = Math.max(s.maxChunk, c.length);
        h.update(c);
      });
      req.on("end", () => {
        s.sha = h.digest("hex");
        seen.push(s);
        res.end(s.sha);
      });
    });
    server.on("clientError", (_err, socket) => socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"));
    listener = largeReadListener(server);
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
    port = (listener.address() as AddressInfo).port;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => listener.close(r));
  });

  /** Raw HTTP/1.1 on one connection: every request written at once, answers read to the end. */
  function exchange(payload: Buffer[]): Promise<string> {
    return new Promise((resolve, reject) => {
      const c = net.connect(port, "127.0.0.1");
      let got = "";
      c.on("error", reject);
      c.on("data", (d) => {
        got += d.toString("latin1");
      });
      c.on("close", () => resolve(got));
      c.on("connect", () => {
        for (const p of payload) c.write(p);
      });
    });
  }

  it("receives a large body intact, in chunks above node's 64 KiB reads, and keeps the connection", async () => {
    const body = randomBytes(8 << 20);
    const sha = createHash("sha256").update(body).digest("hex");
    const head = (close: boolean) =>
      Buffer.from(
        `POST / HTTP/1.1\r\nhost: x\r\ncontent-length: ${body.length}\r\n${close ? "connection: close\r\n" : ""}\r\n`,
      );
    const before = seen.length;
    const out = await exchange([head(false), body, head(true), body]);
    assert.equal(out.split("HTTP/1.1 200 OK").length - 1, 2, out.slice(0, 300));
    assert.equal(out.split(sha).length - 1, 2);
    const mine = seen.slice(before);
    assert.equal(mine.length, 2);
    assert.ok(
      mine.some((s) => s.maxChunk > 64 * 1024),
      `largest chunk ${Math.max(...mine.map((s) => s.maxChunk))} bytes`,
    );
  });

  it("answers a malformed request with 400 through the server's clientError", async () => {
    const out = await exchange([Buffer.from("NOT HTTP AT ALL\r\n\r\n")]);
    assert.match(out, /^HTTP\/1\.1 400 /);
  });

  it("serves ordinary clients (fetch, keep-alive) and small requests", async () => {
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: `hello ${i}` });
      assert.equal(r.status, 200);
      assert.equal(await r.text(), createHash("sha256").update(`hello ${i}`).digest("hex"));
    }
  });
});

describe("large-read listener on a Node without user-buffer reads", () => {
  it("hands connections to the HTTP server unchanged, which reads them itself", { timeout: 20_000 }, async () => {
    const server = http.createServer((req, res) => {
      let n = 0;
      req.on("data", (c: Buffer) => {
        n += c.length;
      });
      req.on("end", () => res.end(String(n)));
    });
    const listener = largeReadListener(server);
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
    const port = (listener.address() as AddressInfo).port;
    // The method lives on the stream handles' prototype: hidden for this test only.
    const probe = net.connect(port, "127.0.0.1");
    await new Promise((r) => probe.once("connect", r));
    let proto: object | null = (probe as unknown as { _handle: object })._handle;
    while (proto && !Object.hasOwn(proto, "useUserBuffer")) proto = Object.getPrototypeOf(proto);
    probe.destroy();
    assert.ok(proto, "this Node has useUserBuffer: the large-read path is the one in use");
    const saved = Object.getOwnPropertyDescriptor(proto, "useUserBuffer") as PropertyDescriptor;
    Reflect.deleteProperty(proto, "useUserBuffer");
    try {
      const body = randomBytes(2 << 20);
      for (let i = 0; i < 2; i++) {
        const r = await fetch(`http://127.0.0.1:${port}/`, {
          method: "POST",
          body,
          signal: AbortSignal.timeout(10_000),
        });
        assert.equal(await r.text(), String(body.length));
      }
    } finally {
      Object.defineProperty(proto, "useUserBuffer", saved);
      server.closeAllConnections();
      await new Promise((r) => listener.close(r));
    }
  });
});

const TRIM_MODULE = path.resolve(import.meta.dirname, "..", "dist", "aenv-trim.node");

describe("aenv-trim.node", { skip: existsSync(TRIM_MODULE) ? false : "dist/aenv-trim.node not built" }, () => {
  it("drops the whole pages inside a buffer (they read as zeros) and only those", () => {
    const m = { exports: {} as { discard?: (b: Buffer) => boolean } };
    process.dlopen(m, TRIM_MODULE);
    const buf = Buffer.allocUnsafe(1 << 20).fill(7);
    assert.equal(m.exports.discard?.(buf), true);
    const page = 4096;
    const zeros = buf.reduce((n, b) => n + (b === 0 ? 1 : 0), 0);
    assert.ok(zeros >= buf.length - 2 * page, `only ${zeros} of ${buf.length} bytes dropped `);
    assert.ok(zeros % page === 0, `${zeros} bytes dropped: not whole pages`);
    buf.fill(9);
    assert.equal(
      buf.reduce((n, b) => n + (b === 9 ? 1 : 0), 0),
      buf.length,
      "usable again after the drop",
    );
  });

  it("reduce() gives back what V8 holds beyond its live objects, which a full GC and a trim leave", () => {
    // A child with --expose-gc: garbage made, collected and trimmed, then reduce().
    const script = `
      const fs = require("node:fs");
      const m = { exports: {} };
      process.dlopen(m, ${JSON.stringify(TRIM_MODULE)});
      const anon = () => Number(/Anonymous:\\s+(\\d+)/.exec(fs.readFileSync("/proc/self/smaps_rollup", "utf8"))[1]);
      let a = [];
      for (let i = 0; i < 3e5; i++) a.push({ i, s: "x" + i });
      a = null;
      globalThis.gc();
      m.exports.trim();
      const before = anon();
      const reduced = m.exports.reduce();
      console.log(JSON.stringify({ reduced, before, after: anon() }));`;
    const out = execFileSync(process.execPath, ["--expose-gc", "--max-semi-space-size=1", "-e", script], {
      encoding: "utf8",
    });
    const r = JSON.parse(out) as { reduced: boolean; before: number; after: number };
    assert.equal(r.reduced, true, "V8's low-memory notification was not reached");
    assert.ok(r.before - r.after >= 1024, `anonymous memory ${r.before} -> ${r.after} KiB: under 1 MiB given back`);
  });
});
