import { closeSync, existsSync, fsyncSync, openSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";

/** fsyncs every file of a checkpoint image and the folder, so a rename makes it durable. */
export function syncDir(dir: string): void {
  for (const name of readdirSync(dir)) {
    const fd = openSync(join(dir, name), "r");
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
  const dfd = openSync(dir, "r");
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/** Moves a finished image from its temporary name to its final one, durably. */
export function commitImage(tmp: string, final: string): void {
  syncDir(tmp);
  rmSync(final, { recursive: true, force: true });
  renameSync(tmp, final);
  const pfd = openSync(dirname(final), "r");
  try {
    fsyncSync(pfd);
  } finally {
    closeSync(pfd);
  }
}

export function isCompleteImage(dir: string | undefined): boolean {
  return !!dir && existsSync(join(dir, "checkpoint.img")) && existsSync(join(dir, "pages.img"));
}

export function imageBytes(dir: string): number {
  let n = 0;
  for (const name of readdirSync(dir)) n += statSync(join(dir, name)).size;
  return n;
}
