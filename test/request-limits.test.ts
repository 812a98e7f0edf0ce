// Slow and greedy clients cannot hold the listener: a slowloris client (a header byte every
// half second) is cut off after the headers timeout while /health stays quick; past the
// connection cap a newcomer takes the place of an idle connection (test/connection-limits.test.ts
// has one client against the others), and the ones still open keep working.
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

const CAP = 12;
let server: TestServer;

before(async () => {
  server = await startServer({
    env: { AENV_HEADERS_TIMEOUT: "2", AENV_MAX_CONNECTIONS: String(CAP), AENV_KEEP_ALIVE_TIMEOUT: "60" },
  });
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(server.port, "127.0.0.1", () => resolve(s));
    s.once("error", reject);
  });
}

/** One GET /health on an open socket: its status line, or "closed" when the server hung up instead. */
function healthOn(s: Socket): Promise<string> {
  return new Promise((resolve) => {
    let buf = "";
    const done = (v: string) => {
      s.off("data", onData);
      s.off("close", onClose);
      resolve(v);
    };
    const onData = (d: Buffer) => {
      buf += d.toString();
      if (buf.includes("\r\n\r\n")) done(buf.split("\r\n")[0] ?? "");
    };
    const onClose = () => done("closed");
    s.on("data", onData);
    s.once("close", onClose);
    s.on("error", () => {});
    s.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n");
  });
}

test("a slowloris client is cut off after the headers timeout; /health stays responsive", async () => {
  const t0 = Date.now();
  const closedAt: number[] = [];
  const sockets = await Promise.all(Array.from({ length: 6 }, () => open()));
  const drips: NodeJS.Timeout[] = [];
  for (const s of sockets) {
    s.on("error", () => {});
    s.once("close", () => closedAt.push(Date.now() - t0));
    s.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    // One more header byte every half second: never idle, never done.
    drips.push(setInterval(() => s.writable && s.write("a"), 500));
  }
  try {
    for (let i = 0; i < 8; i++) {
      const h0 = Date.now();
      assert.equal((await fetch(`${server.url}/health`)).status, 204);
      assert.ok(Date.now() - h0 < 1000, "/health slowed down");
      await sleep(500);
    }
    // Headers timeout 2 s, checked every 0.5 s: all cut by now (4 s later).
    assert.equal(closedAt.length, sockets.length, `cut off: ${closedAt.length} of ${sockets.length}`);
    for (const ms of closedAt) assert.ok(ms < 4000, `a slow client lived ${ms} ms`);
  } finally {
    for (const d of drips) clearInterval(d);
    for (const s of sockets) s.destroy();
  }
});

test("past the cap a newcomer takes the place of an idle connection; open ones keep working", async () => {
  await sleep(200);
  const held: Socket[] = [];
  const closed = new Set<Socket>();
  try {
    for (let i = 0; i < CAP + 4; i++) {
      const s = await open();
      s.once("close", () => closed.add(s));
      assert.match(await healthOn(s), /^HTTP\/1\.1 204/, `connection ${i} is served`);
      held.push(s);
    }
    // Never more than the cap at once: the oldest idle ones were closed for the newcomers.
    for (let i = 0; held.length - closed.size > CAP; i++) {
      assert.ok(i < 50, `${held.length - closed.size} connections open with a cap of ${CAP}`);
      await sleep(100);
    }
    // The connections still open are served as before.
    for (const s of held.slice(-3)) assert.match(await healthOn(s), /^HTTP\/1\.1 204/);
  } finally {
    for (const s of held) s.destroy();
  }
  // Once they are gone, new connections are accepted again.
  await sleep(300);
  assert.equal((await fetch(`${server.url}/health`)).status, 204);
});
