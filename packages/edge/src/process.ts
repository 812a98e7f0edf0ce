/** What the aenv-server and aenv-gateway processes do alike: cluster flags, the safety net, stopping. */
import type { Logger } from "pino";

/** parseArgs options naming the cluster's Redis: a URL, or Sentinels and the master they watch. */
export const CLUSTER_FLAGS = {
  cluster: { type: "string" },
  "cluster-sentinels": { type: "string" },
  "cluster-master": { type: "string" },
} as const;

/**
 * The last line of defence, not the fix: every promise the process starts is awaited or has
 * its own handler. One that slips through is logged loudly ("BUG: …", which tests look for)
 * and the process keeps serving, rather than one bad request stopping everything it serves.
 */
export function installSafetyNet(log: Logger, name: string): void {
  process.on("unhandledRejection", (reason) => {
    log.error({ err: reason }, `BUG: unhandled promise rejection (${name} keeps running)`);
  });
  process.on("uncaughtException", (err, origin) => {
    log.error({ err, origin }, `BUG: uncaught exception (${name} keeps running)`);
  });
}

/** SIGTERM and SIGINT run `stop` once (a second signal while it runs is ignored), then exit 0. */
export function stopOnSignals(stop: (signal: NodeJS.Signals) => Promise<void>): void {
  let stopping = false;
  const onSignal = async (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    await stop(signal);
    process.exit(0);
  };
  process.on("SIGTERM", () => void onSignal("SIGTERM"));
  process.on("SIGINT", () => void onSignal("SIGINT"));
}
