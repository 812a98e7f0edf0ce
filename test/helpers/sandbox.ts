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

/**
 * A background command keeping a counter in one process's memory (from `start`), written to
 * `file` five times a second (a temp file renamed over it: a read never sees it half-written).
 * One python process, not a shell loop: `mv` and `sleep` in a bash loop are two fork+execs a
 * tick, ~40 ms of CPU each in gVisor, and five sandboxes ticking that way took half of a
 * 2-core host, slowing every other call in the test by 5-10x.
 */
export function counterLoop(file: string, start = 0): string {
  return [
    "python3 -c 'import os, time",
    `i = ${start}`,
    "while True:",
    "    i += 1",
    `    open("${file}.new", "w").write("%d\\n" % i)`,
    `    os.replace("${file}.new", "${file}")`,
    "    time.sleep(0.2)'",
  ].join("\n");
}
