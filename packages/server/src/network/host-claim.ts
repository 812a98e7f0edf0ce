/**
 * A server's claim on host-wide network names: its namespace/link prefix and its slot range.
 * Two servers on one host with the same prefix delete each other's namespaces at start (a
 * server removes what a previous run of its prefix left) and reuse each other's slot
 * addresses, so requests meant for one sandbox reach another's envd or a deleted namespace:
 * sandboxes break silently. A second server with a claimed name refuses to start instead.
 *
 * A claim is a file holding the owner's PID and start time in /run/aenv (a tmpfs emptied at boot, root's),
 * made with link(2), which fails if the name exists. A claim whose process is gone is stale
 * and replaced with rename(2) under a mkdir(2) mutex, so that of two servers replacing it at
 * once one wins and the other is told to retry.
 */
import { linkSync, mkdirSync, readFileSync, renameSync, rmdirSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { isAlive as alive, startOf } from "../util/process-identity.js";

export const HOST_CLAIM_DIR = "/run/aenv";

export class HostClaimError extends Error {}

/** What a claim file says: the holder's PID and start time. */
function holderOf(path: string): { pid: number; start?: string; text: string } | undefined {
  try {
    const text = readFileSync(path, "utf8");
    const [pidText, start] = text.trim().split(" ");
    const pid = Number.parseInt(pidText ?? "", 10);
    return Number.isSafeInteger(pid) && pid > 0 ? { pid, ...(start ? { start } : {}), text } : undefined;
  } catch {
    return undefined;
  }
}

const ME = `${process.pid} ${startOf(process.pid) ?? ""}`.trim();

export class HostClaim {
  private readonly held: string[] = [];

  constructor(private readonly dir = HOST_CLAIM_DIR) {}

  /**
   * Claims every name for this process, or none: throws HostClaimError naming the server that
   * holds one (`what` says what the name is, for the message).
   */
  take(names: Array<{ name: string; what: string }>): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    try {
      for (const n of names) this.takeOne(n.name, n.what);
    } catch (err) {
      this.release();
      throw err;
    }
  }

  private takeOne(name: string, what: string): void {
    const path = join(this.dir, `${name}.pid`);
    const tmp = join(this.dir, `.${name}.${process.pid}.tmp`);
    writeFileSync(tmp, `${ME}\n`, { mode: 0o600 });
    try {
      try {
        linkSync(tmp, path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        const owner = holderOf(path);
        if (owner && owner.pid !== process.pid && alive(owner)) {
          throw new HostClaimError(
            `${what} is in use by another server on this host (pid ${owner.pid}): give each server on a host its own AENV_NET_PREFIX and AENV_SLOT_CIDR`,
          );
        }
        this.replaceStale(path, tmp, owner?.text, what);
      }
      this.held.push(path);
    } finally {
      try {
        unlinkSync(tmp);
      } catch {
        // renamed into place
      }
    }
  }

  private replaceStale(path: string, tmp: string, stale: string | undefined, what: string): void {
    const mutex = `${path}.replacing`;
    try {
      mkdirSync(mutex, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      throw new HostClaimError(
        `${what} is being claimed by another server starting now; retry (if none is, remove ${mutex})`,
      );
    }
    try {
      // Read again under the mutex: another server may have replaced it since.
      if (holderOf(path)?.text !== stale) throw new HostClaimError(`${what} was just claimed by another server`);
      renameSync(tmp, path);
    } finally {
      rmdirSync(mutex);
    }
  }

  /** Gives back what this process holds (only files that still name it). */
  release(): void {
    for (const path of this.held.splice(0)) {
      if (holderOf(path)?.pid !== process.pid) continue;
      try {
        unlinkSync(path);
      } catch {
        // already gone
      }
    }
  }
}
