import { isIPv4, isIPv6 } from "node:net";
import { InvalidRequestError } from "@aenv/edge/errors";

/**
 * A user's own proxy for a sandbox's egress (E2B `SandboxEgressProxyConfig`), as stored in the
 * sandbox record. The password stays on the server: API answers leave it out.
 */
export interface EgressProxySpec {
  /** `host:port` (SOCKS5, E2B's form) or `socks5://`, `http://`, `https://` followed by it. */
  address: string;
  username?: string;
  password?: string;
}

/** How the host side talks to the proxy: SOCKS5 or HTTP CONNECT, in the clear or over TLS. */
export interface ProxyEndpoint {
  kind: "socks5" | "http";
  tls: boolean;
  host: string;
  port: number;
}

const SCHEMES: Record<string, Omit<ProxyEndpoint, "host" | "port">> = {
  socks5: { kind: "socks5", tls: false },
  socks5h: { kind: "socks5", tls: false },
  http: { kind: "http", tls: false },
  https: { kind: "http", tls: true },
};
const HOST_NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/i;
/** RFC 1929 carries each of them in a length byte. */
const MAX_CREDENTIAL_BYTES = 255;

function bad(message: string): never {
  throw new InvalidRequestError(`network.egressProxy.${message}`);
}

/** The endpoint an address names, or why it names none (the message completes "network.egressProxy."). */
export function parseProxyAddress(address: string): ProxyEndpoint | { error: string } {
  let rest = address.trim();
  let scheme = "socks5";
  const m = /^([a-z][a-z0-9+.-]*):\/\//i.exec(rest);
  if (m) {
    scheme = (m[1] as string).toLowerCase();
    rest = rest.slice(m[0].length);
  }
  const kind = SCHEMES[scheme];
  if (!kind) return { error: `address: scheme '${scheme.slice(0, 20)}' is not one of socks5, http, https` };
  rest = rest.replace(/\/$/, "");
  if (rest.includes("@")) return { error: "address: credentials go in username and password, not in the address" };
  if (/[/?#]/.test(rest)) return { error: "address: expected host:port, without a path" };
  const i = rest.lastIndexOf(":");
  const host = i < 0 ? rest : rest.slice(0, i);
  const portText = i < 0 ? "" : rest.slice(i + 1);
  if (host.length === 0) return { error: "address: the host is missing (expected host:port)" };
  if (host.startsWith("[") || isIPv6(host)) return { error: "address: IPv6 proxy addresses are not supported" };
  if (!isIPv4(host) && (!HOST_NAME.test(host) || /^[\d.]+$/.test(host))) {
    return { error: `address: '${host.slice(0, 80)}' is not a host name or IPv4 address` };
  }
  if (!/^\d{1,5}$/.test(portText)) return { error: "address: the port is missing (expected host:port)" };
  const port = Number(portText);
  if (port < 1 || port > 65535) return { error: `address: port ${port} is outside 1-65535` };
  return { ...kind, host: host.toLowerCase(), port };
}

/** Checks a client's egressProxy; null and undefined mean none. */
export function validateEgressProxy(raw: unknown): EgressProxySpec | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== "object" || Array.isArray(raw)) bad("expected an object with address, username, password");
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!["address", "username", "password"].includes(k))
      bad(`${k.slice(0, 40)} is not a field (address, username, password)`);
  }
  if (typeof o.address !== "string" || o.address.length === 0) bad("address is required (host:port)");
  if (o.address.length > 300) bad("address is longer than 300 characters");
  const ep = parseProxyAddress(o.address);
  if ("error" in ep) bad(ep.error);
  const spec: EgressProxySpec = { address: o.address.trim() };
  for (const k of ["username", "password"] as const) {
    const v = o[k];
    if (v === undefined) continue;
    if (typeof v !== "string") bad(`${k} must be a string`);
    if (v.length === 0) bad(`${k} is empty`);
    if (Buffer.byteLength(v) > MAX_CREDENTIAL_BYTES) bad(`${k} is longer than ${MAX_CREDENTIAL_BYTES} bytes`);
    // HTTP proxies get them in a header: line breaks there would be a way to add headers.
    if (/[\0\r\n]/.test(v)) bad(`${k} holds a NUL or line break`);
    spec[k] = v;
  }
  if (spec.password !== undefined && spec.username === undefined) bad("password needs a username");
  return spec;
}

/** What API answers show of a proxy: never the password. */
export function publicEgressProxy(p: EgressProxySpec): { address: string; username?: string } {
  return { address: p.address, ...(p.username !== undefined ? { username: p.username } : {}) };
}
