// One client holding the listener: idle keep-alive connections from one address (and then from
// a few) against the API/proxy listener of a real server, with its caps lowered. Other clients,
// GET /health and API key holders must still be served. Client addresses are loopback
// addresses bound on the client side (127.0.0.x): each is "another client" to the server.
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

const MAX = 24;
const PER_CLIENT = 8;
let server: TestServer;
const opened: Raw[] = [];

before(async () => {
  server = await startServer({
    env: { AENV_MAX_CONNECTIONS: String(MAX), AENV_MAX_CONNECTIONS_PER_CLIENT: String(PER_CLIENT) },
  });
});

after(async () => {
  for (const c of opened) c.socket.destroy();
  await server?.stop();
  if (server) cleanupDataDir(server);
});

/** A raw client connection that records what the server sent and whether it was closed. */
interface Raw {
  socket: Socket;
  data: string;
  closed: boolean;
  changed: () => Promise<void>;
}

/** Opens one connection from `from` (a loopback address) and waits until it is established. */
function open(from: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: server.port, localAddress: from });
    let wake: () => void = () => undefined;
    const c: Raw = {
      socket,
      data: "",
      closed: false,
      changed: () => new Promise((r) => (wake = r)),
    };
    opened.push(c);
    socket.on("data", (d: Buffer) => {
      c.data += d.toString("latin1");
      wake();
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      c.closed = true;
      wake();
    });
    socket.once("connect", () => resolve(c));
    socket.once("error", reject);
  });
}

async function openMany(from: string, n: number): Promise<Raw[]> {
  const out: Raw[] = [];
  for (let i = 0; i < n; i++) out.push(await open(from));
  return out;
}

/**
 * Sends one keep-alive request on a connection and returns the status of the answer, or 0 when
 * the server closed the connection without one (refused at accept, or closed to make room).
 */
async function ask(c: Raw, path: string, headers: Record<string, string> = {}): Promise<number> {
  const start = c.data.length;
  if (!c.closed) {
    const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
    c.socket.write(`GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n${extra.join("")}\r\n`);
  }
  for (;;) {
    const got = c.data.slice(start);
    const head = got.indexOf("\r\n\r\n");
    if (head >= 0) {
      const len = Number(/\r\ncontent-length: (\d+)/i.exec(got.slice(0, head))?.[1] ?? 0);
      if (got.length >= head + 4 + len) return Number(got.slice(9, 12));
    }
    if (c.closed) return 0;
    const waited = await Promise.race([c.changed().then(() => true), sleep(10_000).then(() => false)]);
    if (!waited) throw new Error(`no answer to ${path} within 10 s`);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const key = () => ({ "x-api-key": server.apiKey });

async function statuses(conns: Raw[], path = "/health", headers?: Record<string, string>): Promise<number[]> {
  const out: number[] = [];
  for (const c of conns) out.push(await ask(c, path, headers));
  return out;
}

function closeAll(conns: Raw[]): void {
  for (const c of conns) c.socket.destroy();
}

test("one address holds at most its share; other clients, /health and key holders are served", async () => {
  const greedy = await openMany("127.0.0.2", PER_CLIENT + 4);
  const got = await statuses(greedy);
  assert.deepEqual(
    got,
    [...Array(PER_CLIENT).fill(204), ...Array(4).fill(0)],
    "the greedy address keeps its first connections and no more",
  );
  // Another client, /health and an authenticated call, each on a connection of its own.
  assert.equal(await ask(await open("127.0.0.3"), "/health"), 204);
  assert.equal(await ask(await open("127.0.0.3"), "/sandboxes", key()), 200);
  assert.equal(await ask(await open("127.0.0.3"), "/sandboxes"), 401);
  closeAll(opened.splice(0));
});

test("connections that carried the API key do not count against their address", async () => {
  const holder = await openMany("127.0.0.4", PER_CLIENT);
  assert.deepEqual(await statuses(holder, "/sandboxes", key()), Array(PER_CLIENT).fill(200));
  const more = await openMany("127.0.0.4", 4);
  assert.deepEqual(await statuses(more, "/sandboxes", key()), Array(4).fill(200));
  closeAll(opened.splice(0));
});

test("at the global cap a newcomer is served: an idle connection of the greediest client makes room", async () => {
  // Three addresses fill the listener with idle connections (each within its share).
  const greedy = [
    ...(await openMany("127.0.0.5", PER_CLIENT)),
    ...(await openMany("127.0.0.6", PER_CLIENT)),
    ...(await openMany("127.0.0.7", PER_CLIENT)),
  ];
  assert.equal(greedy.length, MAX);
  assert.equal(await ask(await open("127.0.0.8"), "/health"), 204);
  assert.equal(await ask(await open("127.0.0.9"), "/sandboxes", key()), 200);
  assert.equal(await ask(await open("127.0.0.10"), "/health"), 204);
  // Room was made by closing idle greedy connections (their close reaches us soon after).
  for (let i = 0; greedy.filter((c) => c.closed).length < 3; i++) {
    assert.ok(i < 50, "idle greedy connections were closed to make room");
    await sleep(100);
  }
  closeAll(opened.splice(0));
});
