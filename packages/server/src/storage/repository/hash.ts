import { createHash } from "node:crypto";

export const sha256 = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

const queue: Array<{ data: Uint8Array; resolve(hex: string): void }> = [];
let pumping = false;

function pump(): void {
  const job = queue.shift();
  if (!job) {
    pumping = false;
    return;
  }
  job.resolve(sha256(job.data));
  // Queued from inside an immediate: runs on the next turn, after pending I/O.
  setImmediate(pump);
}

/**
 * sha256 of one buffer per turn of the event loop. Chunks arrive in batches (32 reads done at
 * once, one zstd run's outputs) and hashing a batch in one go stalled the API and the proxy
 * for 100-300 ms during background commits (measured); queued here, other work runs between
 * two chunks.
 */
export function sha256Fair(data: Uint8Array): Promise<string> {
  return new Promise((resolve) => {
    queue.push({ data, resolve });
    if (!pumping) {
      pumping = true;
      setImmediate(pump);
    }
  });
}
