import { closeSync, constants, fsyncSync, openSync, readdirSync, renameSync, rmSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname, join } from "node:path";

/** fsync of a folder: makes a rename or a new entry in it durable. */
export async function fsyncDir(path: string): Promise<void> {
  const fh = await open(path, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function fsyncPathSync(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Moves a finished flat folder (a checkpoint image) from its temporary name to its final one,
 * durably: every file and the folder are fsynced before the rename, the parent after it.
 */
export function commitDir(tmp: string, final: string): void {
  for (const name of readdirSync(tmp)) fsyncPathSync(join(tmp, name));
  fsyncPathSync(tmp);
  rmSync(final, { recursive: true, force: true });
  renameSync(tmp, final);
  fsyncPathSync(dirname(final));
}
