/**
 * Publishing state by rename, durably: after a crash a reader finds the old version or the
 * whole new one, never an empty or torn file under the final name. That needs the data on
 * disk before the rename (fsync of the file) and the rename itself on disk after it (fsync of
 * the folder); without the first, ext4 and xfs may commit the rename before the data.
 * Every rename that publishes durable state goes through here (the state db aside: SQLite
 * does its own).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, constants, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { exec } from "./exec.js";

export interface DurableWriteOptions {
  /** File mode of the new file (default 0644). */
  mode?: number;
  /** Mode of folders created on the way (default 0755). */
  dirMode?: number;
}

/** fsync of a file or folder by path (a folder's fsync makes entries in it durable). */
export function fsyncPathSync(path: string): void {
  const fd = openSync(path, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

const tempBeside = (path: string) => join(dirname(path), `.${basename(path)}.tmp-${randomBytes(6).toString("hex")}`);

/** Writes `data` to `path` atomically and durably: temp file, fsync, rename, fsync of the folder. */
export function writeFileDurableSync(path: string, data: string | Uint8Array, opts: DurableWriteOptions = {}): void {
  mkdirSync(dirname(path), { recursive: true, mode: opts.dirMode ?? 0o755 });
  const tmp = tempBeside(path);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, opts.mode ?? 0o644);
  try {
    try {
      const buf = typeof data === "string" ? Buffer.from(data) : data;
      for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off, buf.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  fsyncPathSync(dirname(path));
}

/** Async writeFileDurableSync. */
export async function writeFileDurable(path: string, data: string | Uint8Array, opts: DurableWriteOptions = {}) {
  await mkdir(dirname(path), { recursive: true, mode: opts.dirMode ?? 0o755 });
  const tmp = tempBeside(path);
  try {
    const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, opts.mode ?? 0o644);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await fsyncPath(dirname(path));
}

/**
 * Publishes a finished file or folder under its final name: fsync of it before the rename
 * (for a folder: its entries; files inside are the caller's to have synced), fsync of the
 * destination folder after. `final` must not be a non-empty folder.
 */
export function renameDurableSync(from: string, final: string): void {
  fsyncPathSync(from);
  renameSync(from, final);
  fsyncPathSync(dirname(final));
}

export async function renameDurable(from: string, final: string): Promise<void> {
  await fsyncPath(from);
  await rename(from, final);
  await fsyncPath(dirname(final));
}

/**
 * Publishes a whole tree (a template's root filesystem, an unpacked image): thousands of files
 * are flushed by one syncfs of their filesystem (`sync -f`) rather than one fsync each, then
 * renamed durably.
 */
export function publishTreeSync(from: string, final: string): void {
  execFileSync("sync", ["-f", from], { stdio: "ignore", timeout: 10 * 60_000 });
  renameDurableSync(from, final);
}

export async function publishTree(from: string, final: string): Promise<void> {
  await exec("sync", ["-f", from], { timeoutMs: 10 * 60_000 });
  await renameDurable(from, final);
}
