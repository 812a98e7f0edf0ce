/**
 * Host-side memory accounting for gVisor sandboxes: the PSS of every runsc process that
 * belongs to a sandbox (sentry `runsc-sandbox`, `runsc-gofer`, and their children, the
 * systrap stubs), and the system's MemAvailable.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

interface Proc {
  pid: number;
  ppid: number;
  comm: string;
  argv: string[];
}

function readProc(pid: number): Proc | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // comm is in parentheses and may contain spaces: fields resume after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ppid = Number(rest[1]);
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
    return { pid, ppid, comm, argv };
  } catch {
    return undefined; // exited meanwhile
  }
}

export function listProcs(): Proc[] {
  const out: Proc[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const p = readProc(Number(e));
    if (p) out.push(p);
  }
  return out;
}

const SANDBOX_ARGV0 = new Set(["runsc-sandbox", "runsc-gofer"]);

/**
 * PIDs of one sandbox: the long-lived runsc processes (argv[0] runsc-sandbox / runsc-gofer)
 * whose command line mentions the id (the sentry names it; the gofer's --bundle path holds
 * it), plus all their descendants. Short-lived CLI calls (`runsc exec`, `runsc events`) are
 * not counted.
 */
export function sandboxPids(id: string, procs: Proc[] = listProcs()): number[] {
  const roots = procs.filter((p) => SANDBOX_ARGV0.has(p.argv[0] ?? "") && p.argv.some((a) => a.includes(id)));
  const children = new Map<number, number[]>();
  for (const p of procs) {
    const list = children.get(p.ppid) ?? [];
    list.push(p.pid);
    children.set(p.ppid, list);
  }
  const seen = new Set<number>();
  const stack = roots.map((p) => p.pid);
  while (stack.length) {
    const pid = stack.pop() as number;
    if (seen.has(pid)) continue;
    seen.add(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return [...seen].sort((a, b) => a - b);
}

function nameOf(p: Proc | undefined): string {
  if (!p) return "?";
  return p.argv[0] ?? `[${p.comm}]`;
}

/** Proportional set size of one process in KiB (0 when it is gone). */
export function pssKiB(pid: number): number {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** A process's full smaps: its PSS and a digest that identifies its address space. */
function addressSpace(pid: number): { pssKiB: number; digest: string } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, "utf8");
  } catch {
    return undefined;
  }
  let pss = 0;
  for (const m of text.matchAll(/^Pss:\s+(\d+) kB/gm)) pss += Number(m[1]);
  return { pssKiB: pss, digest: createHash("sha1").update(text).digest("hex") };
}

export interface SandboxPss {
  id: string;
  pids: number[];
  /** Distinct address spaces among pids (systrap stub processes share one per guest mm). */
  addressSpaces: number;
  pssKiB: number;
  /**
   * Per process: argv[0], or [comm] when the cmdline is empty (systrap stubs), its PSS in MiB,
   * and, when it shares its address space with an earlier pid, that pid (its PSS then counts 0).
   */
  procs: { pid: number; name: string; pssMiB: number; sameMmAs?: number }[];
}

/**
 * PSS of each sandbox, read from one snapshot of the process table. systrap's stub processes
 * are clones that share one mm (CLONE_VM without CLONE_THREAD); /proc/<pid>/smaps of each shows
 * the same mm, so summing them would count it several times. Processes of one sandbox whose
 * whole smaps text is identical (every mapping, address and counter) are taken as one address
 * space and counted once. Two distinct mms are practically never identical to the kB, and
 * when they would be (fresh untouched stubs) they hold next to nothing.
 */
export function sandboxesPss(ids: readonly string[]): SandboxPss[] {
  const procs = listProcs();
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  return ids.map((id) => {
    const pids = sandboxPids(id, procs);
    const firstByDigest = new Map<string, number>();
    let total = 0;
    const rows: SandboxPss["procs"] = [];
    for (const pid of pids) {
      const as = addressSpace(pid);
      const row: SandboxPss["procs"][number] = { pid, name: nameOf(byPid.get(pid)), pssMiB: 0 };
      if (as) {
        row.pssMiB = Math.round((as.pssKiB / 1024) * 10) / 10;
        const first = firstByDigest.get(as.digest);
        if (first === undefined) {
          firstByDigest.set(as.digest, pid);
          total += as.pssKiB;
        } else {
          row.sameMmAs = first;
        }
      }
      rows.push(row);
    }
    return { id, pids, addressSpaces: firstByDigest.size, pssKiB: total, procs: rows };
  });
}

export function memAvailableKiB(): number {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"));
  if (!m) throw new Error("MemAvailable not found in /proc/meminfo");
  return Number(m[1]);
}

/** MemAvailable in MiB, the mean of `reads` reads 250 ms apart (one read jitters by a few MiB). */
export async function memAvailableMiB(reads = 4): Promise<number> {
  let sum = 0;
  for (let i = 0; i < reads; i++) {
    if (i) await sleep(250);
    sum += memAvailableKiB();
  }
  return sum / reads / 1024;
}

/**
 * MemAvailable once it stops moving (3 reads a second apart within 8 MiB, at most 30 s): what
 * a server frees after a kill (a fork's image, a data folder) goes on after its runsc is gone.
 */
export async function memAvailableSettledMiB(): Promise<number> {
  const v: number[] = [];
  const deadline = Date.now() + 30_000;
  for (;;) {
    v.push(memAvailableKiB() / 1024);
    const last = v.slice(-3);
    if ((last.length === 3 && Math.max(...last) - Math.min(...last) < 8) || Date.now() > deadline) {
      return last.reduce((a, b) => a + b, 0) / last.length;
    }
    await sleep(1000);
  }
}
