import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** runsc writes the state file first and the memory file last: both present means complete. */
export function isCompleteImage(dir: string | undefined): boolean {
  return !!dir && existsSync(join(dir, "checkpoint.img")) && existsSync(join(dir, "pages.img"));
}

export function imageBytes(dir: string): number {
  let n = 0;
  for (const name of readdirSync(dir)) n += statSync(join(dir, name)).size;
  return n;
}
