// The connection guard both listeners (API/proxy and gateway) are made with: who counts as one
// client, and what is never closed to make room (a request in flight, an upgraded tunnel).
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { test } from "node:test";
import { clientKey } from "../src/connection-guard.js";
import { createLimitedServer, DEFAULT_HTTP_LIMITS } from "../src/http-limits.js";

test("a client is an IPv4 address, or the /64 of an IPv6 one", () => {
  assert.equal(clientKey("10.1.2.3"), "10.1.2.3");
  assert.equal(clientKey("::ffff:10.1.2.3"), "10.1.2.3");
  assert.equal(clientKey("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  assert.equal(clientKey("2001:db8:1:2::9"), "2001:db8:1:2::/64");
  assert.equal(clientKey("2001:0db8:0001:0002:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  assert.equal(clientKey("2001:db8::1"), "2001:db8:0:0::/64");
  assert.equal(clientKey("::1"), "0:0:0:0::/64");
});

/** Opens a connection; resolves once established, with a promise of its close. */
function open(port: number): Promise<{ socket: Socket; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    const closed = new Promise<void>((r) => socket.once("close", () => r()));
    socket.on("error", () => undefined);
    socket.once("connect", () => resolve({ socket, closed }));
    socket.once("error", reject);
  });
}

const isClosed = (p: Promise<void>) =>
  Promise.race([p.then(() => true), new Promise((r) => setTimeout(() => r(false), 300))]);

test("at the cap, requests in flight and tunnels are kept: the newcomer is refused", async () => {
  const limits = { ...DEFAULT_HTTP_LIMITS, maxConnections: 2, maxConnectionsPerClient: 0 };
  const held: (() => void)[] = [];
  // Requests are held open until the test lets them go.
  const server = createLimitedServer(limits, (_req, res) => held.push(() => res.end("ok")));
  const tunnels: Duplex[] = [];
  server.on("upgrade", (_req, socket: Duplex) => {
    tunnels.push(socket);
    socket.write("HTTP/1.1 101 Switching Protocols\r\n\r\n");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  try {
    const busy = await open(port);
    busy.socket.write("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    const tunnel = await open(port);
    tunnel.socket.write("GET / HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: test\r\n\r\n");
    await new Promise((r) => tunnel.socket.once("data", r));
    while (held.length === 0) await new Promise((r) => setTimeout(r, 10));
    const late = await open(port);
    assert.equal(await isClosed(late.closed), true, "nothing idle to close: the newcomer is refused");
    assert.equal(await isClosed(busy.closed), false, "a request in flight is kept");
    assert.equal(await isClosed(tunnel.closed), false, "a tunnel is kept");
    // Answered, the first connection is idle: the next newcomer takes its place.
    for (const h of held) h();
    await new Promise((r) => busy.socket.once("data", r));
    const next = await open(port);
    assert.equal(await isClosed(busy.closed), true, "the idle connection made room");
    assert.equal(await isClosed(next.closed), false);
    for (const s of [busy, tunnel, late, next]) s.socket.destroy();
  } finally {
    for (const t of tunnels) t.destroy();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});
