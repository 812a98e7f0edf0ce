import { copyFileSync, linkSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";

/**
 * Hard-links every regular file under `src` into `dest` (created), copying where a link is
 * refused (another filesystem). The copy then holds the files whatever later renames or
 * deletes `src`. Anything but folders and regular files is left out.
 */
export function linkTree(src: string, dest: string): void {
  mkdirSync(dest, { recursive: true });
  for (const e of readdirSync(src, { withFileTypes: true })) {
    const from = join(src, e.name);
    const to = join(dest, e.name);
    if (e.isDirectory()) linkTree(from, to);
    else if (e.isFile()) {
      try {
        linkSync(from, to);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== "EXDEV" && code !== "EPERM" && code !== "EMLINK") throw err;
        copyFileSync(from, to);
      }
    }
  }
}
