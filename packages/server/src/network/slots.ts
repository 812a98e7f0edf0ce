import { existsSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { AtCapacityError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import { exec } from "../util/exec.js";
import {
  GUEST_GATEWAY,
  GUEST_IP,
  GUEST_PREFIX,
  MAX_SLOTS,
  parseCidr16,
  type SlotAddresses,
  slotAddresses,
} from "./addresses.js";
import { compileEgress, type EgressPolicy } from "./policy.js";
import { type EgressGuard, routerTable } from "./router-rules.js";

export interface Slot extends SlotAddresses {
  netnsPath: string;
}

/**
 * Slot links carry jumbo frames: gVisor's netstack pays per packet, so 64 KiB segments make
 * proxy and file traffic several times faster. TCP MSS negotiation keeps segments to the
 * outside world at the real path's size.
 */
const MTU = 65000;

const DEFAULT_POLICY = compileEgress(undefined, true);

/** What the orchestrator needs of sandbox network slots (SlotPool; LoopbackSlots for the sim driver). */
export interface SlotAllocator {
  /** Whether a slot's network still exists (a sandbox that outlived a server crash uses it). */
  exists(index: number): boolean;
  describe(index: number): Slot;
  /** Removes what a previous run left, except the kept slots, and sets up the host side. */
  init(keep?: number[], guard?: EgressGuard): Promise<void>;
  acquire(policy: EgressPolicy): Promise<Slot>;
  applyPolicy(slot: Slot, policy: EgressPolicy): Promise<void>;
  release(slot: Slot): Promise<void>;
  close(): Promise<void>;
}

/**
 * Allocates per-sandbox network slots and keeps a small pool of prepared ones, so that
 * creating a sandbox does not pay for namespace setup (~60 ms of `ip` calls).
 */
export class SlotPool implements SlotAllocator {
  private readonly base: number;
  private readonly free: Slot[] = [];
  private readonly inUse = new Map<number, Slot>();
  /** The router table each slot holds now, as this process set it. */
  private readonly tables = new Map<number, string>();
  /** Slots whose new TCP the host redirects to the egress tunnel (their sandbox names a proxy). */
  private readonly tunneled = new Set<number>();
  private guard: EgressGuard = { denied: [], resolvers: [] };
  private next = 0;
  private refilling: Promise<void> | undefined;

  constructor(
    private readonly cidr: string,
    private readonly log: Logger,
    private readonly warm = 4,
    /** Names this pool's namespaces, links and host table: two servers on one host must differ. */
    private readonly prefix = "aenv",
  ) {
    if (!/^[a-z]{1,4}$/.test(prefix)) throw new Error(`network prefix must be 1-4 lowercase letters, got '${prefix}'`);
    this.base = parseCidr16(cidr);
  }

  /** Whether a slot's namespaces exist (a sandbox that outlived a server crash still uses them). */
  exists(index: number): boolean {
    const a = slotAddresses(this.base, index, this.prefix);
    return existsSync(`/var/run/netns/${a.sandboxNetns}`) && existsSync(`/var/run/netns/${a.routerNetns}`);
  }

  describe(index: number): Slot {
    const a = slotAddresses(this.base, index, this.prefix);
    return { ...a, netnsPath: `/var/run/netns/${a.sandboxNetns}` };
  }

  /**
   * Removes every namespace and link a previous server run left behind, except the slots of
   * sandboxes that were taken over, then sets up the host side.
   */
  async init(keep: number[] = [], guard?: EgressGuard): Promise<void> {
    if (guard) this.guard = guard;
    const proxy = this.guard.proxyPorts;
    // The egress proxy listens on every host address: only slots may open connections to it,
    // and only at their link's host end (in the slot range), where their routers redirect to.
    // At any other host address the port would be a way onto the host past the drop below.
    const proxyIn = proxy
      ? `iifname "${this.prefix}-h*" ip daddr ${this.cidr} tcp dport { ${proxy.http}, ${proxy.tls} } accept;
  tcp dport { ${proxy.http}, ${proxy.tls} } drop;`
      : "";
    const tunnel = this.guard.tunnelPort;
    // Redirected connections only (ct status dnat): a slot dialling the port itself is dropped.
    const tunnelIn = tunnel
      ? `iifname "${this.prefix}-h*" ip daddr ${this.cidr} tcp dport ${tunnel} ct status dnat accept;
  tcp dport ${tunnel} drop;`
      : "";
    const resolvers =
      this.guard.resolvers.length > 0 ? `ip daddr { ${this.guard.resolvers.join(", ")} } tcp dport 53 return;` : "";
    // New TCP from a tunneled slot to anywhere but the host goes to the tunnel, at the slot
    // link's host end (redirect takes the incoming link's address). Its router let it out.
    const tunnelNat = tunnel
      ? `chain tunnel {
    type nat hook prerouting priority dstnat; policy accept;
    iifname != "${this.prefix}-h*" return;
    ip saddr != @tunneled return;
    fib daddr type local return;
    ${resolvers}
    meta l4proto tcp redirect to :${tunnel};
  }`
      : "";
    this.tunneled.clear();
    await this.cleanupAll(new Set(keep));
    for (const index of keep) this.inUse.set(index, this.describe(index));
    await exec("sysctl", ["-qw", "net.ipv4.ip_forward=1"]);
    await exec("nft", ["-f", "-"], {
      input: `
table inet ${this.prefix}-host
delete table inet ${this.prefix}-host
table inet ${this.prefix}-host {
  set tunneled { type ipv4_addr; }
  ${tunnelNat}
  chain guard_in {
  type filter hook input priority filter; policy accept;
  ${proxyIn}
  ${tunnelIn}
  iifname "${this.prefix}-h*" ct state new drop;
  }
  chain guard_fwd {
    type filter hook forward priority filter; policy accept;
    iifname "${this.prefix}-h*" oifname "${this.prefix}-h*" drop;
  }
  chain masq { type nat hook postrouting priority srcnat; ip saddr ${this.cidr} oifname != "${this.prefix}-h*" masquerade; }
}
`,
    });
    this.refill();
  }

  async cleanupAll(keep: Set<number> = new Set()): Promise<void> {
    const kept = (name: string) => keep.has(Number(/\d+$/.exec(name)?.[0] ?? -1));
    let names: string[] = [];
    try {
      names = await readdir("/var/run/netns");
    } catch {
      names = [];
    }
    const re = new RegExp(`^${this.prefix}-[rs]\\d+$`);
    const ours = names.filter((n) => re.test(n) && !kept(n));
    await Promise.all(ours.map((n) => exec("ip", ["netns", "delete", n], { allowFail: true })));
    const links = await exec("ip", ["-o", "link", "show"], { allowFail: true });
    const linkRe = new RegExp(`^\\d+: (${this.prefix}-h\\d+)[@:]`, "gm");
    const stale = [...links.stdout.matchAll(linkRe)].map((m) => m[1] as string).filter((l) => !kept(l));
    await Promise.all(stale.map((l) => exec("ip", ["link", "delete", l], { allowFail: true })));
  }

  async acquire(policy: EgressPolicy): Promise<Slot> {
    // A free slot that already holds this policy's table saves an nft run (~25 ms a start).
    const i = this.free.findIndex(
      (f) => this.tables.get(f.index) === routerTable(this.cidr, f.hostIp, policy, this.guard),
    );
    let slot = i >= 0 ? this.free.splice(i, 1)[0] : this.free.shift();
    if (!slot) slot = await this.create(this.allocateIndex());
    this.inUse.set(slot.index, slot);
    this.refill();
    try {
      await this.applyPolicy(slot, policy);
    } catch (err) {
      await this.release(slot);
      throw err;
    }
    return slot;
  }

  async applyPolicy(slot: Slot, policy: EgressPolicy): Promise<void> {
    await this.setTunnel(slot, policy.tunnel);
    const table = routerTable(this.cidr, slot.hostIp, policy, this.guard);
    // Reused slots usually keep their table: skipping the nft process saves ~30 ms a start.
    if (this.tables.get(slot.index) === table) return;
    this.tables.delete(slot.index);
    await exec("ip", ["netns", "exec", slot.routerNetns, "nft", "-f", "-"], { input: table });
    this.tables.set(slot.index, table);
  }

  /**
   * Puts the slot's address in or out of the host's tunneled set. Without a tunnel port (no
   * listener) a proxy cannot be honoured: refused rather than letting traffic out directly.
   */
  private async setTunnel(slot: Slot, on: boolean): Promise<void> {
    if (on === this.tunneled.has(slot.index)) return;
    if (on && !this.guard.tunnelPort) throw new Error("the egress tunnel is not running");
    const verb = on ? "add" : "delete";
    await exec("nft", [verb, "element", "inet", `${this.prefix}-host`, "tunneled", `{ ${slot.slotIp} }`], {
      allowFail: !on,
    });
    if (on) this.tunneled.add(slot.index);
    else this.tunneled.delete(slot.index);
  }

  /** Gives a slot back. netstack took the guest address off eth0, so it is re-applied first. */
  async release(slot: Slot): Promise<void> {
    this.inUse.delete(slot.index);
    await this.setTunnel(slot, false);
    try {
      await exec("ip", ["-n", slot.sandboxNetns, "-batch", "-"], {
        input: [
          "addr flush dev eth0",
          `addr add ${GUEST_IP}/${GUEST_PREFIX} dev eth0`,
          "link set eth0 up",
          `route replace default via ${GUEST_GATEWAY}`,
        ].join("\n"),
      });
      this.free.push(slot);
    } catch (err) {
      this.log.warn({ err, slot: slot.index }, "slot reset failed; destroying it");
      await this.destroy(slot);
    }
  }

  async destroy(slot: Slot): Promise<void> {
    this.inUse.delete(slot.index);
    await this.setTunnel(slot, false).catch(() => undefined);
    this.tables.delete(slot.index);
    // -force: each step runs even if an earlier one failed (a half-made slot).
    await exec("ip", ["-force", "-batch", "-"], {
      input: [
        `netns delete ${slot.sandboxNetns}`,
        `netns delete ${slot.routerNetns}`,
        `link delete ${slot.hostIf}`,
        "",
      ].join("\n"),
      allowFail: true,
    });
  }

  async close(): Promise<void> {
    await this.refilling;
    const all = [...this.free, ...this.inUse.values()];
    this.free.length = 0;
    await Promise.all(all.map((s) => this.destroy(s)));
    await exec("nft", ["delete", "table", "inet", `${this.prefix}-host`], { allowFail: true });
  }

  private allocateIndex(): number {
    const taken = new Set([...this.inUse.keys(), ...this.free.map((s) => s.index)]);
    for (let i = 0; i < MAX_SLOTS; i++) {
      const idx = (this.next + i) % MAX_SLOTS;
      if (!taken.has(idx)) {
        this.next = idx + 1;
        taken.add(idx);
        return idx;
      }
    }
    throw new AtCapacityError("no free network slots");
  }

  private refill(): void {
    if (this.refilling) return;
    this.refilling = (async () => {
      try {
        while (this.free.length < this.warm) this.free.push(await this.create(this.allocateIndex()));
      } catch (err) {
        this.log.error({ err }, "slot pool refill failed");
      } finally {
        this.refilling = undefined;
      }
    })();
  }

  private async create(index: number): Promise<Slot> {
    const a = slotAddresses(this.base, index, this.prefix);
    const s = { ...a, netnsPath: `/var/run/netns/${a.sandboxNetns}` };
    try {
      // Prepared with the policy most sandboxes have (internet on, no rules), so their starts
      // need no nft run; acquire() puts any other policy in place before a sandbox uses it.
      const table = routerTable(this.cidr, a.hostIp, DEFAULT_POLICY, this.guard);
      // One process from here (a shell running the steps), not one per step: starting a
      // process from this large one costs far more than from a shell, most of all when a
      // fork makes many slots at once (16 children: ~40 processes fewer).
      await exec("sh", ["-e", "-s"], {
        input: [
          "ip -batch - <<'AENV_EOF'",
          `netns add ${a.routerNetns}`,
          `netns add ${a.sandboxNetns}`,
          `link add ${a.hostIf} type veth peer name uplink netns ${a.routerNetns}`,
          `addr add ${a.hostIp}/30 dev ${a.hostIf}`,
          `link set ${a.hostIf} mtu ${MTU} up`,
          "AENV_EOF",
          `ip -n ${a.routerNetns} -batch - <<'AENV_EOF'`,
          `link add gw type veth peer name eth0 netns ${a.sandboxNetns}`,
          `addr add ${a.slotIp}/30 dev uplink`,
          `addr add ${GUEST_GATEWAY}/${GUEST_PREFIX} dev gw`,
          "link set lo up",
          `link set uplink mtu ${MTU} up`,
          `link set gw mtu ${MTU} up`,
          `route add default via ${a.hostIp}`,
          "AENV_EOF",
          `ip -n ${a.sandboxNetns} -batch - <<'AENV_EOF'`,
          `addr add ${GUEST_IP}/${GUEST_PREFIX} dev eth0`,
          "link set lo up",
          `link set eth0 mtu ${MTU} up`,
          `route add default via ${GUEST_GATEWAY}`,
          "AENV_EOF",
          `ip netns exec ${a.routerNetns} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward && exec nft -f -' <<'AENV_EOF'`,
          table,
          "AENV_EOF",
          "",
        ].join("\n"),
      });
      this.tables.set(index, table);
      return s;
    } catch (err) {
      await this.destroy(s);
      throw err;
    }
  }
}
