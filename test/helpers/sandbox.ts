// Waits inside a sandbox instead of fixed sleeps: a busy 2-core machine starts servers slowly.
import type { Sandbox } from "e2b";

/** Resolves once the shell test `cond` passes inside the sandbox; throws after `timeoutS`. */
export async function untilTrue(sbx: Sandbox, cond: string, timeoutS = 30): Promise<void> {
  const loop = `for i in $(seq ${timeoutS * 10}); do ${cond} && exit 0; sleep 0.1; done; exit 1`;
  // A non-zero exit makes the SDK throw.
  await sbx.commands.run(loop, { timeoutMs: (timeoutS + 10) * 1000 }).catch(() => {
    throw new Error(`'${cond}' still false after ${timeoutS} s`);
  });
}

/**
 * Resolves once a socket listens on the port inside the sandbox; throws after `timeoutS`.
 * Reads /proc/net/tcp rather than connecting: one-shot test servers must not see a probe.
 */
export function untilListening(sbx: Sandbox, port: number, timeoutS = 30): Promise<void> {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return untilTrue(sbx, `grep -Eq ':${hex} [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6`, timeoutS);
}
