import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { now } from "../results.js";
import { type Kernel, Queue, type Sink } from "./kernel.js";

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The longest tail of buf that is a start of marker (held back: the marker may be split). */
function heldTail(buf: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, buf.length); n > 0; n--) {
    if (marker.startsWith(buf.slice(buf.length - n))) return n;
  }
  return 0;
}

/**
 * Splits one output stream of a cell at its end marker. The marker is written alone, with no
 * newline of ours before it: a read may return part of what one write put in the pipe (seen
 * in gVisor), so a newline written with the marker could reach the cell's output first.
 */
class MarkedStream {
  private buf = "";
  ended = false;
  rest = "";
  constructor(
    private readonly marker: string,
    private readonly emit: (text: string) => void,
  ) {}
  push(chunk: string): void {
    if (this.ended) return;
    this.buf += chunk;
    const i = this.buf.indexOf(this.marker);
    if (i >= 0) {
      const before = this.buf.slice(0, i);
      if (before) this.emit(before);
      this.rest = this.buf.slice(i + this.marker.length);
      this.ended = true;
      return;
    }
    // A newline is sent on at once (a line is complete); only a possible start of the marker waits.
    const keep = heldTail(this.buf, this.marker);
    if (this.buf.length > keep) this.emit(this.buf.slice(0, this.buf.length - keep));
    this.buf = this.buf.slice(this.buf.length - keep);
  }
}

/**
 * A long-lived bash: cells are sourced into it (variables, functions and the folder carry
 * over), stdin is /dev/null for them, and markers on stdout and stderr end each cell. An
 * interrupted cell takes the shell with it (its process group is killed): the next cell
 * gets a fresh shell in the same folder.
 */
export class BashKernel implements Kernel {
  readonly language = "bash";
  private proc?: ChildProcessWithoutNullStreams;
  private readonly queue = new Queue();
  private readonly dir: string;
  private count = 0;
  private sandboxEnv: Record<string, string> = {};

  constructor(private readonly cwd: string) {
    this.dir = `/tmp/.aenv-code-interpreter/bash-${randomBytes(6).toString("hex")}`;
    mkdirSync(this.dir, { recursive: true });
  }

  private shell(): ChildProcessWithoutNullStreams {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) return this.proc;
    const p = spawn("bash", ["--noprofile", "--norc"], {
      cwd: this.cwd,
      env: { ...process.env, ...this.sandboxEnv },
      detached: true,
    });
    p.stdout.setEncoding("utf8");
    p.stderr.setEncoding("utf8");
    p.on("error", () => undefined);
    this.proc = p;
    return p;
  }

  private kill(): void {
    const p = this.proc;
    this.proc = undefined;
    if (p?.pid && p.exitCode === null) {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        p.kill("SIGKILL");
      }
    }
  }

  /** Runs a script in the shell; resolves with its exit status (undefined: the shell died). */
  private run(script: string, sink: Sink | undefined, signal?: AbortSignal): Promise<number | undefined> {
    const p = this.shell();
    const mark = `__AENV_END_${randomBytes(8).toString("hex")}__`;
    const file = `${this.dir}/cell.sh`;
    writeFileSync(file, script);
    return new Promise((resolve) => {
      const out = new MarkedStream(`${mark} `, (text) => sink?.({ type: "stdout", text, timestamp: now() }));
      const err = new MarkedStream(`${mark}\n`, (text) => sink?.({ type: "stderr", text, timestamp: now() }));
      const onOut = (d: string) => {
        out.push(d);
        check();
      };
      const onErr = (d: string) => {
        err.push(d);
        check();
      };
      const onExit = () => finish(undefined);
      const onAbort = () => {
        this.kill();
        finish(undefined);
      };
      const finish = (rc: number | undefined) => {
        p.stdout.off("data", onOut);
        p.stderr.off("data", onErr);
        p.off("exit", onExit);
        signal?.removeEventListener("abort", onAbort);
        resolve(rc);
      };
      const check = () => {
        const m = /^(\d+)\n/.exec(out.rest);
        if (out.ended && err.ended && m) finish(Number(m[1]));
      };
      p.stdout.on("data", onOut);
      p.stderr.on("data", onErr);
      p.once("exit", onExit);
      signal?.addEventListener("abort", onAbort, { once: true });
      p.stdin.write(`. ${shQuote(file)} </dev/null; printf '%s %d\\n' ${mark} $?; printf '%s\\n' ${mark} >&2\n`);
    });
  }

  private exports(env: Record<string, string>): string {
    return Object.entries(env)
      .filter(([k]) => NAME_RE.test(k))
      .map(([k, v]) => `export ${k}=${shQuote(v)}\n`)
      .join("");
  }

  execute(code: string, env: Record<string, string>, sink: Sink, signal: AbortSignal): Promise<void> {
    return this.queue.run(async () => {
      if (signal.aborted) return;
      const keys = Object.keys(env).filter((k) => NAME_RE.test(k));
      if (keys.length)
        await this.run(
          `${keys.map((k) => `__aenv_saved_${k}=\${${k}-__aenv_unset}\n`).join("")}${this.exports(env)}`,
          undefined,
        );
      const rc = await this.run(code, sink, signal);
      this.count++;
      sink({ type: "number_of_executions", execution_count: this.count });
      if (rc === undefined && !signal.aborted) {
        sink({
          type: "error",
          name: "KernelDied",
          value: "the shell exited; the next cell starts a new one",
          traceback: "",
        });
      } else if (rc !== undefined && rc !== 0) {
        sink({ type: "error", name: "ExitCodeError", value: `exit code ${rc}`, traceback: "" });
      }
      if (keys.length && this.proc) {
        const restore = keys
          .map(
            (k) =>
              `if [ "$__aenv_saved_${k}" = __aenv_unset ]; then unset ${k}; else export ${k}="$__aenv_saved_${k}"; fi\n`,
          )
          .join("");
        await this.run(restore, undefined);
      }
    });
  }

  setEnv(env: Record<string, string>): Promise<void> {
    this.sandboxEnv = { ...this.sandboxEnv, ...env };
    return this.queue.run(async () => {
      if (this.proc) await this.run(this.exports(env), undefined);
    });
  }

  reseed(): Promise<void> {
    return this.queue.run(async () => {
      if (this.proc) await this.run("RANDOM=$(od -An -N4 -tu4 /dev/urandom)", undefined);
    });
  }

  restart(): Promise<void> {
    return this.queue.run(async () => {
      this.kill();
      this.count = 0;
    });
  }

  async shutdown(): Promise<void> {
    this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
