/**
 * Gives envd's free memory back to the kernel: a sandbox that moved files through envd keeps
 * their buffers (V8 garbage, then ~16 MiB of freed but untrimmed glibc heap), which its memory
 * use and every later pause image, snapshot and fork child would carry (3 x 8 MiB uploaded:
 * images of 34-45 MiB instead of ~16). malloc_trim goes through aenv-trim.node, built from
 * init/aenv-trim.c and shipped next to the bundle; where it is not there (envd run from source
 * in tests; a host without node's headers at build time) trimHeap does nothing.
 */
import path from "node:path";
import { log } from "./log.js";

/** A full, synchronous GC where node runs with --expose-gc (the runtime folder's flags). */
export function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return;
  const t = performance.now();
  gc();
  log("debug", "gc", { ms: Math.round(performance.now() - t) });
}

interface TrimModule {
  trim: () => boolean;
  discard?: (buf: Buffer) => boolean;
  reduce?: () => boolean;
}

let trimModule: TrimModule | null | undefined;

function loadTrimModule(): TrimModule | null {
  if (trimModule === undefined) {
    trimModule = null;
    try {
      // The bundle runs as `node /.aenv/envd/envd.js`: the module sits beside it.
      const m = { exports: {} as Partial<TrimModule> };
      process.dlopen(m, path.join(path.dirname(process.argv[1] ?? "."), "aenv-trim.node"));
      if (typeof m.exports.trim === "function") trimModule = m.exports as TrimModule;
    } catch {
      // Not shipped here.
    }
  }
  return trimModule;
}

/** Buffers whose content is scratch between uses: their pages are dropped at every trim. */
const scratchBuffers = new Set<Buffer>();

export function registerScratchBuffer(buf: Buffer): void {
  scratchBuffers.add(buf);
}

export function trimHeap(): boolean {
  const m = loadTrimModule();
  if (!m) return false;
  if (m.discard) for (const b of scratchBuffers) m.discard(b);
  return m.trim();
}

/**
 * Before an image: V8 gives back the memory it holds beyond its live objects (compacting full
 * GCs, the young generation shrunk to its minimum, pooled pages released), then a trim. A
 * plain full GC leaves those pages committed, and every image would carry them (~3 MiB of
 * envd's ~16 after a few calls). Without the module: a full GC and nothing else.
 */
export function reduceHeap(): void {
  const m = loadTrimModule();
  const t = performance.now();
  if (m?.discard) for (const b of scratchBuffers) m.discard(b);
  const reduced = m?.reduce?.() ?? false;
  if (!reduced) {
    collectGarbage();
    m?.trim();
  }
  log("debug", "heap reduced", { ms: Math.round(performance.now() - t), v8: reduced });
}

let pending: NodeJS.Timeout | undefined;

/**
 * After a large file transfer: a full GC (node runs with --expose-gc in sandboxes) and a trim
 * once transfers have stopped for delayMs, off the request's path. A pause right after still
 * trims at /quiesce.
 */
export function reclaimSoon(delayMs = 250): void {
  if (pending) {
    pending.refresh();
    return;
  }
  pending = setTimeout(() => {
    pending = undefined;
    collectGarbage();
    trimHeap();
  }, delayMs);
  pending.unref();
}
