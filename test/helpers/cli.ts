import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "./server.js";

export const AENV_BIN = join(ROOT, "packages/cli/bin/aenv.js");

export interface Res {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the real `aenv` binary with the environment `env()` gives at call time. */
export function cliRunner(env: () => NodeJS.ProcessEnv) {
  /** Its stdin is `input`, then closed (at once when none is given). */
  const spawnAenv = (args: string[], input?: string): Promise<Res> =>
    new Promise((resolve, reject) => {
      const p = spawn(process.execPath, [AENV_BIN, ...args], { env: env(), stdio: ["pipe", "pipe", "pipe"] });
      // A command that exits without reading its stdin closes the pipe: not the test's failure.
      p.stdin.on("error", () => undefined);
      p.stdin.end(input);
      let stdout = "";
      let stderr = "";
      p.stdout.on("data", (d: Buffer) => (stdout += d));
      p.stderr.on("data", (d: Buffer) => (stderr += d));
      p.on("error", reject);
      p.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  const aenv = (...args: string[]) => spawnAenv(args);
  const piped = (input: string, ...args: string[]) => spawnAenv(args, input);
  const ok = async (...args: string[]) => {
    const r = await aenv(...args);
    // Both streams: a command that fails with nothing on stderr still says something.
    assert.equal(r.code, 0, `aenv ${args.join(" ")} exited ${r.code}; stderr: ${r.stderr}; stdout: ${r.stdout}`);
    return r;
  };
  return { aenv, ok, piped };
}
