/** Where benchmarks find the template tree and write their results. */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { TEMPLATES_DIR } from "../test/helpers/server.js";

/** BENCH_RESULTS_DIR moves them (the smoke test writes to a temporary folder). */
export const RESULTS = resolve(process.env.BENCH_RESULTS_DIR ?? join(import.meta.dirname, "results"));

/**
 * A template's root filesystem as its catalog record names it: `rootfs-r<N>` for a template
 * built or imported (the default `base` included), `rootfs` for older layouts.
 */
export function templateRootfs(name = "base"): string {
  const dir = join(TEMPLATES_DIR, name);
  let rootfsDir = "rootfs";
  try {
    const rec = JSON.parse(readFileSync(join(dir, "template.json"), "utf8")) as { rootfsDir?: unknown };
    if (typeof rec.rootfsDir === "string" && /^[A-Za-z0-9._-]+$/.test(rec.rootfsDir)) rootfsDir = rec.rootfsDir;
  } catch (err) {
    throw new Error(`template '${name}' has no readable record in ${dir}: ${(err as Error).message}`);
  }
  return join(dir, rootfsDir);
}
