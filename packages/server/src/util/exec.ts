import { spawn } from "node:child_process";

export class CommandError extends Error {
  constructor(
    readonly cmd: string,
    readonly code: number | null,
    readonly stderr: string,
  ) {
    super(`${cmd} failed (exit ${code}): ${stderr.trim().split("\n").slice(-3).join(" | ")}`);
  }
}

export interface ExecOptions {
  input?: string;
  timeoutMs?: number;
  /** Don't throw on a non-zero exit. */
  allowFail?: boolean;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a short host command and collects its output. Never for runsc run/restore --detach (they keep stdio). */
export function exec(cmd: string, args: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      env: opts.env ?? process.env,
      cwd: opts.cwd,
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs).unref() : undefined;
    child.on("error", (err) => {
      if (timer) clearTimeout(timer);
      reject(err);
    });
    child.on("close", (code) => {
      if (timer) clearTimeout(timer);
      if (code !== 0 && !opts.allowFail) {
        reject(new CommandError(`${cmd} ${args.join(" ")}`, code, stderr || stdout));
        return;
      }
      resolve({ code, stdout, stderr });
    });
    if (child.stdin) {
      // A command may exit without reading its input; that is its business, not a crash.
      child.stdin.on("error", () => {});
      child.stdin.end(opts.input);
    }
  });
}
