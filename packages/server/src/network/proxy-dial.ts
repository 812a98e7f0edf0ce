import { lookup } from "node:dns/promises";
import { isIPv4, connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { EgressProxySpec, ProxyEndpoint } from "./egress-proxy-config.js";
import { parseProxyAddress } from "./egress-proxy-config.js";

/** Where a tunnelled connection goes: an IPv4 address, or a name the proxy resolves (remote DNS). */
export interface TunnelTarget {
  host: string;
  port: number;
}

export interface ProxyDialOptions {
  /** Whether the server may open a connection to this proxy address (host, denied ranges). */
  permitted(ip: string): boolean;
  /** Extra roots for a proxy reached over TLS (https://). */
  ca?: string;
  timeoutMs?: number;
}

/** The proxy refused, failed or could not be reached: the sandbox's connection is closed. */
export class ProxyDialError extends Error {}

const HANDSHAKE_TIMEOUT_MS = 15_000;
const MAX_REPLY = 16_384;

/** Reads from a socket until `done` says how many bytes make a whole reply (or the reply is refused). */
function readReply(socket: Socket, done: (b: Buffer) => number | undefined): Promise<{ reply: Buffer; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const cleanup = () => {
      socket.off("data", onData);
      socket.off("close", onClose);
      socket.off("error", onError);
    };
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      let n: number | undefined;
      try {
        n = done(buf);
      } catch (err) {
        cleanup();
        reject(err);
        return;
      }
      if (n !== undefined) {
        cleanup();
        socket.pause();
        resolve({ reply: buf.subarray(0, n), rest: buf.subarray(n) });
      } else if (buf.length > MAX_REPLY) {
        cleanup();
        reject(new ProxyDialError("proxy reply too long"));
      }
    };
    const onClose = () => {
      cleanup();
      reject(new ProxyDialError("proxy closed the connection"));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new ProxyDialError(`proxy connection failed: ${err.message}`));
    };
    socket.on("data", onData);
    socket.on("close", onClose);
    socket.on("error", onError);
    socket.resume();
  });
}

/** RFC 1928 (with RFC 1929 username/password): CONNECT to the target, ATYP IPv4 or domain. */
async function socks5(socket: Socket, target: TunnelTarget, proxy: EgressProxySpec): Promise<Buffer> {
  const auth = proxy.username !== undefined;
  socket.write(Buffer.from([5, 1, auth ? 2 : 0]));
  const hello = await readReply(socket, (b) => (b.length >= 2 ? 2 : undefined));
  const method = hello.reply[1];
  if (hello.reply[0] !== 5 || method !== (auth ? 2 : 0)) {
    throw new ProxyDialError(method === 0xff ? "proxy accepts none of our methods" : "proxy does not speak SOCKS5");
  }
  if (auth) {
    const u = Buffer.from(proxy.username ?? "");
    const p = Buffer.from(proxy.password ?? "");
    socket.write(Buffer.concat([Buffer.from([1, u.length]), u, Buffer.from([p.length]), p]));
    const r = await readReply(socket, (b) => (b.length >= 2 ? 2 : undefined));
    if (r.reply[1] !== 0) throw new ProxyDialError("proxy refused the credentials");
  }
  const port = Buffer.from([target.port >> 8, target.port & 255]);
  const addr = isIPv4(target.host)
    ? Buffer.from([1, ...target.host.split(".").map(Number)])
    : Buffer.concat([Buffer.from([3, Buffer.byteLength(target.host)]), Buffer.from(target.host)]);
  socket.write(Buffer.concat([Buffer.from([5, 1, 0]), addr, port]));
  const r = await readReply(socket, (b) => {
    if (b.length < 5) return undefined;
    const atyp = b[3];
    const len = atyp === 1 ? 4 : atyp === 4 ? 16 : atyp === 3 ? 1 + (b[4] as number) : -1;
    if (len < 0) throw new ProxyDialError("proxy sent a malformed reply");
    return b.length >= 4 + len + 2 ? 4 + len + 2 : undefined;
  });
  if (r.reply[1] !== 0) throw new ProxyDialError(`proxy refused the connection (SOCKS5 reply ${r.reply[1]})`);
  return r.rest;
}

/** HTTP CONNECT, with Basic credentials; a 2xx answer opens the tunnel. */
async function httpConnect(socket: Socket, target: TunnelTarget, proxy: EgressProxySpec): Promise<Buffer> {
  const authority = `${target.host}:${target.port}`;
  const lines = [`CONNECT ${authority} HTTP/1.1`, `Host: ${authority}`];
  if (proxy.username !== undefined) {
    const token = Buffer.from(`${proxy.username}:${proxy.password ?? ""}`).toString("base64");
    lines.push(`Proxy-Authorization: Basic ${token}`);
  }
  socket.write(`${lines.join("\r\n")}\r\n\r\n`);
  const r = await readReply(socket, (b) => {
    const end = b.indexOf("\r\n\r\n");
    return end < 0 ? undefined : end + 4;
  });
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(r.reply.toString("latin1"));
  if (!status) throw new ProxyDialError("proxy does not speak HTTP");
  const code = Number(status[1]);
  if (code === 407) throw new ProxyDialError("proxy refused the credentials (407)");
  if (code < 200 || code > 299) throw new ProxyDialError(`proxy refused the connection (${code})`);
  return r.rest;
}

async function proxyAddress(ep: ProxyEndpoint, o: ProxyDialOptions): Promise<string> {
  const ips = isIPv4(ep.host)
    ? [ep.host]
    : (await lookup(ep.host, { all: true, family: 4 }).catch(() => [])).map((a) => a.address);
  // The address is pinned for this connection: a DNS change cannot move it past this check.
  const ip = ips.find((a) => o.permitted(a));
  if (!ip) throw new ProxyDialError(`proxy ${ep.host} resolves to no address this server may connect to`);
  return ip;
}

function open(ep: ProxyEndpoint, ip: string, o: ProxyDialOptions): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s: Socket = ep.tls
      ? tlsConnect({
          host: ip,
          port: ep.port,
          servername: isIPv4(ep.host) ? undefined : ep.host,
          ...(o.ca ? { ca: o.ca } : {}),
        })
      : netConnect({ host: ip, port: ep.port });
    s.once(ep.tls ? "secureConnect" : "connect", () => {
      s.off("error", onError);
      resolve(s);
    });
    const onError = (err: Error) => reject(new ProxyDialError(`proxy ${ep.host}:${ep.port}: ${err.message}`));
    s.once("error", onError);
  });
}

/**
 * A connection to `target` through the user's proxy, handshake done: what the caller writes
 * next goes to the target. `head` holds bytes the proxy sent past its answer (the target's).
 * Fails closed: any refusal or error rejects, there is no direct fallback.
 */
export async function dialThroughProxy(
  proxy: EgressProxySpec,
  target: TunnelTarget,
  o: ProxyDialOptions,
): Promise<{ socket: Socket; head: Buffer }> {
  const ep = parseProxyAddress(proxy.address);
  if ("error" in ep) throw new ProxyDialError(ep.error);
  const socket = await open(ep, await proxyAddress(ep, o), o);
  socket.on("error", () => socket.destroy());
  socket.setTimeout(o.timeoutMs ?? HANDSHAKE_TIMEOUT_MS, () => socket.destroy(new ProxyDialError("proxy timed out")));
  try {
    const head = ep.kind === "socks5" ? await socks5(socket, target, proxy) : await httpConnect(socket, target, proxy);
    socket.setTimeout(0);
    return { socket, head };
  } catch (err) {
    socket.destroy();
    throw err;
  }
}
