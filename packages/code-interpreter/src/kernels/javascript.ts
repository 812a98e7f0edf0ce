import { type ChildProcess, fork } from "node:child_process";
import { join } from "node:path";
import { now } from "../results.js";
import { type Kernel, Queue, type Sink } from "./kernel.js";

type RunnerMsg =
  | { kind: "stdout" | "stderr"; id: number; text: string }
  | { kind: "result"; id: number; text: string }
  | { kind: "error"; id: number; name: string; value: string; traceback: string }
  | { kind: "done"; id: number };

/**
 * A JavaScript context: a Node child (js-runner) holding the cell's globals. An interrupted
 * cell takes the child with it (synchronous code cannot be stopped otherwise); the next
 * cell starts a fresh one in the same folder.
 */
export class JavaScriptKernel implements Kernel {
  readonly language = "javascript";
  private proc?: ChildProcess;
  private readonly queue = new Queue();
  private seq = 0;
  private count = 0;
  private sandboxEnv: Record<string, string> = {};

  constructor(private readonly cwd: string) {}

  private child(): ChildProcess {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) return this.proc;
    const p = fork(join(__dirname, "js-runner.cjs"), [], {
      cwd: this.cwd,
      env: { ...process.env, ...this.sandboxEnv },
      stdio: ["ignore", "pipe", "pipe", "ipc"],
    });
    p.on("error", () => undefined);
    this.proc = p;
    return p;
  }

  private send(
    msg: { code?: string; env?: Record<string, string | null> },
    sink?: Sink,
    signal?: AbortSignal,
  ): Promise<boolean> {
    const p = this.child();
    const id = ++this.seq;
    return new Promise((resolve) => {
      const onMsg = (m: RunnerMsg) => {
        if (m.id !== id) return;
        if (m.kind === "stdout" || m.kind === "stderr") sink?.({ type: m.kind, text: m.text, timestamp: now() });
        else if (m.kind === "result") sink?.({ type: "result", is_main_result: true, text: m.text });
        else if (m.kind === "error") sink?.({ type: "error", name: m.name, value: m.value, traceback: m.traceback });
        else finish(true);
      };
      const onData = (kind: "stdout" | "stderr") => (d: Buffer) =>
        sink?.({ type: kind, text: d.toString("utf8"), timestamp: now() });
      const out = onData("stdout");
      const err = onData("stderr");
      const onExit = () => finish(false);
      const onAbort = () => {
        p.kill("SIGKILL");
        finish(false);
      };
      const finish = (ok: boolean) => {
        p.off("message", onMsg);
        p.off("exit", onExit);
        p.stdout?.off("data", out);
        p.stderr?.off("data", err);
        signal?.removeEventListener("abort", onAbort);
        resolve(ok);
      };
      p.on("message", onMsg);
      p.stdout?.on("data", out);
      p.stderr?.on("data", err);
      p.once("exit", onExit);
      signal?.addEventListener("abort", onAbort, { once: true });
      p.send({ id, ...msg });
    });
  }

  execute(code: string, env: Record<string, string>, sink: Sink, signal: AbortSignal): Promise<void> {
    return this.queue.run(async () => {
      if (signal.aborted) return;
      const keys = Object.keys(env);
      if (keys.length) await this.send({ env });
      const ok = await this.send({ code }, sink, signal);
      this.count++;
      sink({ type: "number_of_executions", execution_count: this.count });
      if (!ok && !signal.aborted) {
        sink({
          type: "error",
          name: "KernelDied",
          value: "the interpreter exited; the next cell starts a new one",
          traceback: "",
        });
      }
      if (keys.length && this.proc) {
        await this.send({
          env: Object.fromEntries(keys.map((k) => [k, this.sandboxEnv[k] ?? process.env[k] ?? null])),
        });
      }
    });
  }

  setEnv(env: Record<string, string>): Promise<void> {
    this.sandboxEnv = { ...this.sandboxEnv, ...env };
    return this.queue.run(async () => {
      if (this.proc) await this.send({ env });
    });
  }

  /** V8's Math.random cannot be reseeded from outside; crypto.* draws from the OS already. */
  async reseed(): Promise<void> {}

  restart(): Promise<void> {
    return this.queue.run(async () => {
      this.proc?.kill("SIGKILL");
      this.proc = undefined;
      this.count = 0;
    });
  }

  async shutdown(): Promise<void> {
    this.proc?.kill("SIGKILL");
  }
}
