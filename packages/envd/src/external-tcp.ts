/**
 * Established TCP connections between this sandbox and anything outside it, from the kernel's
 * /proc/net/tcp and /proc/net/tcp6 (gVisor's netstack keeps them). Hibernation asks before it
 * saves a sandbox to disk: runsc resets such connections in a checkpoint, and whoever holds
 * the other end would see that, so a sandbox holding one stays frozen in memory instead.
 * Loopback connections are saved with the sandbox; envd's own port is the host's business.
 */
import { readFile } from "node:fs/promises";

const ESTABLISHED = "01";

/** A /proc/net/tcp* address ("0100007F:1F90", or 32 hex digits for IPv6) is loopback. */
function isLoopback(hexAddr: string): boolean {
  const ip = hexAddr.split(":")[0] ?? "";
  if (ip.length === 8) return ip.endsWith("7F"); // little-endian 127.x.x.x
  if (ip.length === 32) {
    if (ip === "00000000000000000000000001000000") return true; // ::1
    // ::ffff:127.x.x.x (IPv4-mapped)
    return ip.startsWith("0000000000000000FFFF0000") && ip.endsWith("7F");
  }
  return false;
}

function port(hexAddr: string): number {
  return Number.parseInt(hexAddr.split(":")[1] ?? "", 16);
}

/** Counts the external connections listed in one /proc/net/tcp* text, envd's own port left out. */
export function countExternal(table: string, ownPort: number): number {
  let n = 0;
  for (const line of table.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    const [local, remote, st] = [f[1], f[2], f[3]];
    if (!local || !remote || st !== ESTABLISHED) continue;
    if (port(local) === ownPort || isLoopback(remote)) continue;
    n++;
  }
  return n;
}

/** Throws where /proc/net/tcp cannot be read: not knowing is not "none". */
export async function externalTcpConnections(ownPort: number): Promise<number> {
  const v4 = await readFile("/proc/net/tcp", "utf8");
  const v6 = await readFile("/proc/net/tcp6", "utf8").catch(() => ""); // no IPv6 in the sandbox
  return countExternal(v4, ownPort) + countExternal(v6, ownPort);
}
