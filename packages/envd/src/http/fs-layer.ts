/** The filesystem-layer routes: capture (filesystem-only pause) and apply (its resume). */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { type EnvdLayerStats, SANDBOX_LOWER_DIR } from "@aenv/protocol";
import { applyLayer } from "../fslayer/apply.js";
import { captureLayer } from "../fslayer/capture.js";
import { log } from "../log.js";
import { sendJson } from "./respond.js";

/** Every process but init and envd (kill(2) with -1): files stay still while they are read. */
function signalAll(sig: "SIGSTOP" | "SIGCONT"): void {
  try {
    process.kill(-1, sig);
  } catch (err) {
    log("warn", "could not signal the sandbox's processes", { sig, err });
  }
}

export async function handleCapture(res: ServerResponse): Promise<void> {
  const stats: EnvdLayerStats = { entries: 0, whiteouts: 0, bytes: 0 };
  const t0 = Date.now();
  signalAll("SIGSTOP");
  try {
    res.writeHead(200, { "Content-Type": "application/x-tar" });
    // An error mid-stream destroys the response: the host sees a cut stream, never a short layer.
    await pipeline(Readable.from(captureLayer({ lower: SANDBOX_LOWER_DIR }, stats)), res);
    log("info", "filesystem layer captured", { ...stats, ms: Date.now() - t0 });
  } finally {
    signalAll("SIGCONT");
  }
}

export async function handleApply(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const t0 = Date.now();
  const stats = await applyLayer(req);
  log("info", "filesystem layer applied", { ...stats, ms: Date.now() - t0 });
  sendJson(res, 200, stats);
}
