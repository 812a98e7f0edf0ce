/**
 * Address plan. Every sandbox sees the same guest address inside its own network namespace,
 * so a restored or forked image never needs re-addressing. Each sandbox also owns a "slot":
 * a router namespace that NATs between the guest address and a unique slot address the
 * host (and so the proxy) reaches.
 */
export const GUEST_IP = "169.254.0.21";
export const GUEST_GATEWAY = "169.254.0.22";
export const GUEST_PREFIX = 30;

export interface SlotAddresses {
  index: number;
  /** Root-namespace end of the slot's uplink veth. */
  hostIp: string;
  /** Router-namespace end; the proxy connects here and is DNATed to the guest. */
  slotIp: string;
  hostIf: string;
  sandboxNetns: string;
  routerNetns: string;
}

export function parseCidr16(cidr: string): number {
  const m = /^(\d+)\.(\d+)\.0\.0\/16$/.exec(cidr);
  if (!m) throw new Error(`slot network must be an a.b.0.0/16 range, got ${cidr}`);
  const a = Number(m[1]);
  const b = Number(m[2]);
  if (a > 255 || b > 255) throw new Error(`bad slot network ${cidr}`);
  return ((a << 24) >>> 0) + (b << 16);
}

function ipString(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

export const MAX_SLOTS = 16383;

export function slotAddresses(base: number, index: number, prefix = "aenv"): SlotAddresses {
  if (index < 0 || index >= MAX_SLOTS) throw new Error(`slot ${index} out of range`);
  const net = base + index * 4;
  return {
    index,
    hostIp: ipString(net + 1),
    slotIp: ipString(net + 2),
    hostIf: `${prefix}-h${index}`,
    sandboxNetns: `${prefix}-s${index}`,
    routerNetns: `${prefix}-r${index}`,
  };
}
