/**
 * Who a process is, for files that name their owner (host claims, zstd scratch folders): a
 * PID alone is not enough, because the kernel reuses PIDs, and a PID means nothing to a
 * process in another PID namespace (a container sharing /run or /dev/shm with the host).
 */
import { readFileSync, readlinkSync } from "node:fs";

/** A process's start time in clock ticks since boot (/proc/PID/stat), which a reused PID does not share. */
export function startOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/** The inode of this process's PID namespace ("4026531836"): PIDs are only comparable within one. */
export function pidNamespace(): string | undefined {
  try {
    return /^pid:\[(\d+)\]$/.exec(readlinkSync("/proc/self/ns/pid"))?.[1];
  } catch {
    return undefined;
  }
}

/**
 * Whether the process still runs: its PID is alive and, when `start` is given, started then
 * (a PID the kernel gave to a newer process is not it).
 */
export function isAlive(h: { pid: number; start?: string }): boolean {
  try {
    process.kill(h.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  return h.start === undefined || startOf(h.pid) === h.start;
}

export const SELF = { pid: process.pid, start: startOf(process.pid), ns: pidNamespace() };
