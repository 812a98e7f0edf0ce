// Minimal user-side proxies for egressProxy tests: a SOCKS5 server (RFC 1928/1929) and an
// HTTP CONNECT server (optionally over TLS), each with one username/password, on loopback.
// Whatever destination they are asked for, they connect to a local target (chosen by the
// asked port): a test sees what the proxy was asked, and the bytes only arrive through it.
import { once } from "node:events";
import { connect, createServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer } from "node:tls";

export interface ProxySeen {
  /** The destination the client asked for, `host:port`. */
  target: string;
  /** Whether the client's credentials were the right ones. */
  authOk: boolean;
  user: string;
}

export interface TestProxy {
  port: number;
  seen: ProxySeen[];
  close(): Promise<void>;
}

async function listen(server: Server, sockets: Set<Socket>, seen: ProxySeen[], host = "127.0.0.1"): Promise<TestProxy> {
  server.listen(0, host);
  await once(server, "listening");
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : 0,
    seen,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** The local port a proxy connects to for a requested destination port. */
export type TargetFor = (port: number) => number;

function toTarget(client: Socket, targetPort: number, head: Buffer, reply: Buffer, sockets: Set<Socket>): void {
  const up = connect({ host: "127.0.0.1", port: targetPort }, () => {
    client.write(reply);
    if (head.length) up.write(head);
    client.pipe(up);
    up.pipe(client);
    client.resume();
  });
  sockets.add(up);
  up.on("error", () => client.destroy());
  up.on("close", () => client.destroy());
  client.on("close", () => up.destroy());
}

/** Reads until `need(buf)` returns a length, then hands over the first that many bytes and the rest. */
function reader(socket: Socket) {
  let buf = Buffer.alloc(0);
  const waiters: Array<() => void> = [];
  socket.on("data", (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    for (const w of waiters.splice(0)) w();
  });
  return async (need: (b: Buffer) => number | undefined): Promise<Buffer> => {
    for (;;) {
      const n = need(buf);
      if (n !== undefined && buf.length >= n) {
        const out = buf.subarray(0, n);
        buf = buf.subarray(n);
        return out;
      }
      if (socket.destroyed) throw new Error("closed");
      await new Promise<void>((r) => waiters.push(r));
    }
  };
}

/** `host`: a loopback address to listen at. */
export function socks5Proxy(user: string, pass: string, targetFor: TargetFor, host = "127.0.0.1"): Promise<TestProxy> {
  const seen: ProxySeen[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((c) => {
    sockets.add(c);
    c.on("error", () => c.destroy());
    const read = reader(c);
    (async () => {
      const hello = await read((b) => (b.length >= 2 ? 2 + (b[1] as number) : undefined));
      if (!hello.subarray(2).includes(2)) {
        c.end(Buffer.from([5, 0xff]));
        return;
      }
      c.write(Buffer.from([5, 2]));
      const auth = await read((b) => {
        if (b.length < 2) return undefined;
        const ulen = b[1] as number;
        return b.length < 3 + ulen ? undefined : 3 + ulen + (b[2 + ulen] as number);
      });
      const ulen = auth[1] as number;
      const u = auth.subarray(2, 2 + ulen).toString();
      const p = auth.subarray(3 + ulen).toString();
      const authOk = u === user && p === pass;
      c.write(Buffer.from([1, authOk ? 0 : 1]));
      if (!authOk) {
        seen.push({ target: "", authOk, user: u });
        c.end();
        return;
      }
      const req = await read((b) => {
        if (b.length < 5) return undefined;
        const atyp = b[3];
        return atyp === 1 ? 10 : atyp === 3 ? 7 + (b[4] as number) : 22;
      });
      const atyp = req[3];
      const host = atyp === 1 ? [...req.subarray(4, 8)].join(".") : req.subarray(5, 5 + (req[4] as number)).toString();
      const port = req.readUInt16BE(req.length - 2);
      seen.push({ target: `${host}:${port}`, authOk, user: u });
      c.pause();
      toTarget(c, targetFor(port), Buffer.alloc(0), Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]), sockets);
    })().catch(() => c.destroy());
  });
  return listen(server, sockets, seen, host);
}

export function connectProxy(
  user: string,
  pass: string,
  targetFor: TargetFor,
  tls?: { key: string; cert: string },
): Promise<TestProxy> {
  const seen: ProxySeen[] = [];
  const sockets = new Set<Socket>();
  const handle = (c: Socket) => {
    sockets.add(c);
    c.on("error", () => c.destroy());
    const read = reader(c);
    (async () => {
      const head = await read((b) => {
        const i = b.indexOf("\r\n\r\n");
        return i < 0 ? undefined : i + 4;
      });
      const text = head.toString("latin1");
      const target = /^CONNECT (\S+) HTTP\/1\.1\r\n/.exec(text)?.[1] ?? "";
      const cred = /\r\nproxy-authorization: basic (\S+)\r\n/i.exec(text)?.[1];
      const [u = "", p = ""] = Buffer.from(cred ?? "", "base64")
        .toString()
        .split(":");
      const authOk = u === user && p === pass;
      seen.push({ target, authOk, user: u });
      if (!authOk) {
        c.end("HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n");
        return;
      }
      c.pause();
      toTarget(
        c,
        targetFor(Number(target.split(":").pop())),
        Buffer.alloc(0),
        Buffer.from("HTTP/1.1 200 Connection established\r\n\r\n"),
        sockets,
      );
    })().catch(() => c.destroy());
  };
  const server = tls ? createTlsServer({ key: tls.key, cert: tls.cert }, handle) : createServer(handle);
  return listen(server, sockets, seen);
}
