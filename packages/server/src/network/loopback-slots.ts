import { AtCapacityError } from "@aenv/edge/errors";
import { MAX_SLOTS, parseCidr16, slotAddresses } from "./addresses.js";
import type { Slot, SlotAllocator } from "./slots.js";

/**
 * Slots that are addresses only, for the sim driver: each sandbox gets the slot address of
 * its index in a 127.X.0.0/16 range, which Linux routes to the loopback interface with no
 * set-up, so the simulated envd listens there and the node's envd client and proxy reach it
 * at the same address and port as a real one. No namespaces, links or nftables rules are
 * made (a simulated sandbox opens no connections, so it has no egress to police): thousands
 * of sandboxes on one host cost no network state.
 */
export class LoopbackSlots implements SlotAllocator {
  private readonly base: number;
  private readonly inUse = new Set<number>();
  private next = 0;

  constructor(
    cidr: string,
    private readonly prefix = "aenv",
  ) {
    if (!/^127\.\d+\.0\.0\/16$/.test(cidr)) {
      throw new Error(`the sim runtime's slot network must be a loopback range 127.X.0.0/16, got ${cidr}`);
    }
    this.base = parseCidr16(cidr);
  }

  exists(): boolean {
    return false;
  }

  describe(index: number): Slot {
    return { ...slotAddresses(this.base, index, this.prefix), netnsPath: "" };
  }

  async init(): Promise<void> {}

  async acquire(): Promise<Slot> {
    for (let i = 0; i < MAX_SLOTS; i++) {
      const idx = (this.next + i) % MAX_SLOTS;
      if (!this.inUse.has(idx)) {
        this.next = idx + 1;
        this.inUse.add(idx);
        return this.describe(idx);
      }
    }
    throw new AtCapacityError("no free network slots");
  }

  async applyPolicy(): Promise<void> {}

  async release(slot: Slot): Promise<void> {
    this.inUse.delete(slot.index);
  }

  async close(): Promise<void> {
    this.inUse.clear();
  }
}
