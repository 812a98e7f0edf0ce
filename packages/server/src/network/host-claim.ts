/**
 * A server's claim on host-wide network names: its namespace/link prefix and its slot range.
 * Two servers on one host with the same prefix delete each other's namespaces at start (a
 * server removes what a previous run of its prefix left) and reuse each other's slot
 * addresses, so requests meant for one sandbox reach another's envd or a deleted namespace:
 * sandboxes break silently. A second server with a claimed name refuses to start instead.
 *
 * A claim is a file holding the owner's PID, start time and PID namespace in /run/aenv (a tmpfs
 * emptied at boot, root's, 0700), made with link(2), which fails if the name exists. A claim
 * whose process is gone is stale and replaced with rename(2) under a mutex file (link(2)
 * too), so that of two servers replacing it at once one wins and the other is told to retry.
 */
import {
  linkSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  type Stats,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { isAlive, SELF } from "../util/process-identity.js";

export const HOST_CLAIM_DIR = "/run/aenv";

export class HostClaimError extends Error {}

type Holder = { pid: number; start?: string; ns?: string; text: string };

/** What a claim (or mutex) file says: the holder's PID, start time and PID namespace. */
function holderOf(path: string): Holder | undefined {
  try {
    const text = readFileSync(path, "utf8");
    const [pidText, start, ns] = text.trim().split(" ");
    const pid = Number.parseInt(pidText ?? "", 10);
    return Number.isSafeInteger(pid) && pid > 0
      ? { pid, ...(start ? { start } : {}), ...(ns ? { ns } : {}), text }
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the holder still runs. One of another PID namespace (a server in a container that
 * shares /run with this host) cannot be checked from here: its PID means another process or
 * none, so it counts as running.
 */
function running(h: Holder): boolean {
  if (h.ns !== undefined && h.ns !== SELF.ns) return true;
  return isAlive(h);
}

const ME = [SELF.pid, SELF.start ?? "", SELF.ns ?? ""].join(" ").trim();

/** A replacement in progress takes microseconds; a mutex of the older (empty folder) layout this old was left by a crash. */
const MUTEX_ABANDONED_MS = 60_000;

export class HostClaim {
  private readonly held: string[] = [];

  constructor(private readonly dir = HOST_CLAIM_DIR) {}

  /**
   * Claims every name for this process, or none: throws HostClaimError naming the server that
   * holds one (`what` says what the name is, for the message).
   */
  take(names: Array<{ name: string; what: string }>): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    this.checkDir();
    try {
      for (const n of names) this.takeOne(n.name, n.what);
    } catch (err) {
      this.release();
      throw err;
    }
  }

  /**
   * Anyone who can write the folder can plant symlinks where root writes, or claims that keep
   * servers from starting: a folder that is a symlink, someone else's, or writable by group
   * or others is refused rather than used.
   */
  private checkDir(): void {
    const st = lstatSync(this.dir);
    const uid = process.geteuid?.();
    if (st.isDirectory() && (uid === undefined || st.uid === uid) && (st.mode & 0o022) === 0) return;
    throw new HostClaimError(
      `${this.dir} must be a folder owned by this user and writable only by it (it is ${st.isSymbolicLink() ? "a symlink" : `uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)}`}): remove it and start again`,
    );
  }

  private takeOne(name: string, what: string): void {
    const path = join(this.dir, `${name}.pid`);
    const tmp = join(this.dir, `.${name}.${process.pid}.tmp`);
    // Made anew, never opened through what is there (O_EXCL): a leftover of a crashed process
    // that had this PID, or a symlink, is not written through.
    rmSync(tmp, { force: true });
    writeFileSync(tmp, `${ME}\n`, { mode: 0o600, flag: "wx" });
    try {
      try {
        linkSync(tmp, path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        const owner = holderOf(path);
        if (owner && owner.text.trim() !== ME && running(owner)) {
          const where = owner.ns !== undefined && owner.ns !== SELF.ns ? " in another PID namespace" : "";
          throw new HostClaimError(
            `${what} is in use by another server on this host (pid ${owner.pid}${where}): give each server on a host its own AENV_NET_PREFIX and AENV_SLOT_CIDR`,
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
    this.lockMutex(mutex, tmp, what);
    try {
      // Read again under the mutex: another server may have replaced it since.
      if (holderOf(path)?.text !== stale) throw new HostClaimError(`${what} was just claimed by another server`);
      renameSync(tmp, path);
    } finally {
      unlinkSync(mutex);
    }
  }

  /**
   * The mutex is a file naming its holder, made with link(2) (fails if it exists). One whose
   * holder is gone (a server killed while replacing a claim) is moved aside and taken, where
   * it used to keep every later start out until someone removed it by hand.
   */
  private lockMutex(mutex: string, tmp: string, what: string): void {
    const busy = () =>
      new HostClaimError(
        `${what} is being claimed by another server starting now; retry (if none is, remove ${mutex})`,
      );
    const link = () => {
      try {
        linkSync(tmp, mutex);
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
        return false;
      }
    };
    if (link()) return;
    let st: Stats;
    try {
      st = lstatSync(mutex);
    } catch {
      if (link()) return;
      throw busy();
    }
    const holder = st.isFile() ? holderOf(mutex) : undefined;
    const abandoned = holder ? !running(holder) : Date.now() - st.mtimeMs > MUTEX_ABANDONED_MS;
    if (!abandoned) throw busy();
    const aside = `${mutex}.${process.pid}.stale`;
    rmSync(aside, { recursive: true, force: true });
    try {
      renameSync(mutex, aside);
    } catch {
      throw busy();
    }
    // Another server may have broken it first and made its own: that one goes back.
    const moved = lstatSync(aside);
    if (moved.ino !== st.ino) {
      if (moved.isFile()) {
        try {
          linkSync(aside, mutex);
        } catch {
          // A third one holds it now.
        }
      }
      rmSync(aside, { recursive: true, force: true });
      throw busy();
    }
    rmSync(aside, { recursive: true, force: true });
    if (!link()) throw busy();
  }

  /** Gives back what this process holds (only files that still name it). */
  release(): void {
    for (const path of this.held.splice(0)) {
      if (holderOf(path)?.text.trim() !== ME) continue;
      try {
        unlinkSync(path);
      } catch {
        // already gone
      }
    }
  }
}
