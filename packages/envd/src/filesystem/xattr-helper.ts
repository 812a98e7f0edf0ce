/**
 * One long-lived `aenv-xattr serve` process that answers metadata calls in order over its
 * stdin/stdout (framing in init/aenv-xattr.c). Starting a process per call cost ~40 ms in
 * gVisor on every getInfo, list and metadata write; a round trip here is well under 1 ms.
 */
import { type ChildProcess, spawn } from "node:child_process";
import type { Socket } from "node:net";
import { nulFrame } from "../nul-frame.js";

/** A call that hangs (a stuck filesystem) ends the helper so the calls after it go on. */
const CALL_TIMEOUT_MS = 10_000;

/** The helper exited or could not start: the call may be tried again on a new one. */
export class XattrHelperGone extends Error {}

interface Pending {
  resolve: (out: string) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class XattrHelper {
  private readonly child: ChildProcess;
  private readonly pending: Pending[] = [];
  private buf: Buffer = Buffer.alloc(0);
  private gone = false;

  constructor(tool: string) {
    this.child = spawn(tool, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
    this.child.on("error", () => this.end());
    this.child.on("exit", () => this.end());
    // A write to a helper that just died: its exit rejects what is pending.
    this.child.stdin?.on("error", () => this.end());
    this.child.stdout?.on("data", (d: Buffer) => this.onData(d));
    this.hold(false);
  }

  /** An idle helper never keeps the process alive; one with calls in flight does. */
  private hold(on: boolean): void {
    for (const h of [this.child, this.child.stdin as Socket | null, this.child.stdout as Socket | null]) {
      if (on) h?.ref();
      else h?.unref();
    }
  }

  get dead(): boolean {
    return this.gone;
  }

  /** Runs `aenv-xattr ARGS…` in the helper: its output, or an Error with what it printed to stderr. */
  call(args: string[]): Promise<string> {
    if (this.gone) return Promise.reject(new XattrHelperGone("xattr helper is not running"));
    if (args.some((a) => a.includes("\0"))) return Promise.reject(new Error("argument contains NUL"));
    const msg = nulFrame(args);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.child.kill("SIGKILL"), CALL_TIMEOUT_MS);
      if (this.pending.length === 0) this.hold(true);
      this.pending.push({ resolve, reject, timer });
      this.child.stdin?.write(msg);
    });
  }

  close(): void {
    this.child.kill("SIGKILL");
  }

  private onData(d: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    while (this.buf.length >= 5) {
      const n = this.buf.readUInt32LE(0);
      if (this.buf.length < 4 + n) return;
      const status = this.buf[4] as number;
      const text = this.buf.subarray(5, 4 + n).toString("utf8");
      this.buf = this.buf.subarray(4 + n);
      const p = this.pending.shift();
      if (this.pending.length === 0) this.hold(false);
      if (!p) continue;
      clearTimeout(p.timer);
      if (status === 0) p.resolve(text);
      else p.reject(new Error(text.trim() || `aenv-xattr exited with ${status}`));
    }
  }

  private end(): void {
    if (this.gone) return;
    this.gone = true;
    for (const p of this.pending.splice(0)) {
      clearTimeout(p.timer);
      p.reject(new XattrHelperGone("xattr helper exited"));
    }
  }
}
