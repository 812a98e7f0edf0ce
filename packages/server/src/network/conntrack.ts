import { readFile } from "node:fs/promises";

/** Where a redirected connection was going before the host's nat rule sent it to a listener here. */
export interface OriginalDestination {
  ip: string;
  port: number;
}

const CONNTRACK = "/proc/net/nf_conntrack";

/**
 * The original destination of one redirected TCP connection, out of the kernel's conntrack
 * table: the entry whose original tuple comes from the peer's address and port and whose reply
 * tuple comes back from the listener's port. Node has no getsockopt(SO_ORIGINAL_DST); the table
 * (this network namespace's, CONFIG_NF_CONNTRACK_PROCFS) says the same.
 */
export function findOriginalDestination(
  table: string,
  peer: { ip: string; port: number },
  listenerPort: number,
): OriginalDestination | undefined {
  const key = `src=${peer.ip} `;
  const sport = `sport=${peer.port} `;
  for (const line of table.split("\n")) {
    if (!line.includes(key) || !line.includes(sport) || !/\btcp\b/.test(line)) continue;
    const f = [...line.matchAll(/\b(src|dst|sport|dport)=(\S+)/g)].map((m) => m[2] as string);
    // Original tuple: src dst sport dport; reply tuple: the same four.
    const [oSrc, oDst, oSport, oDport, rSrc, rDst, rSport, rDport] = f;
    if (oSrc !== peer.ip || oSport !== String(peer.port) || !oDst || !oDport) continue;
    if (rDst !== peer.ip || rSport !== String(listenerPort) || rDport !== String(peer.port) || !rSrc) continue;
    return { ip: oDst, port: Number(oDport) };
  }
  return undefined;
}

export async function originalDestination(
  peer: { ip: string; port: number },
  listenerPort: number,
  read: () => Promise<string> = () => readFile(CONNTRACK, "utf8"),
): Promise<OriginalDestination | undefined> {
  return findOriginalDestination(await read(), peer, listenerPort);
}
