/** One running (or finished) process: pipes or a PTY, live subscribers, exit status. */
import { type ChildProcess, spawn } from "node:child_process";
import { Code, ConnectError } from "@connectrpc/connect";
import { log } from "../log.js";
import { type EndInfo, endFromExit } from "./signals.js";

export type OutputStream = "stdout" | "stderr" | "pty";

export type ProcEvent = { kind: "data"; stream: OutputStream; data: Uint8Array } | { kind: "end"; end: EndInfo };

export type Listener = (ev: ProcEvent) => void;

export interface ProcessConfigInfo {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export interface SpawnSpec {
  config: ProcessConfigInfo;
  /** Resolved, existing working directory. */
  cwd: string;
  env: Record<string, string>;
  uid: number;
  gid: number;
  tag?: string;
  stdin: boolean;
  pty?: { cols: number; rows: number };
}

/** Minimal surface of a node-pty IPty that we use. */
interface PtyLike {
  pid: number;
  onData(cb: (d: string | Buffer) => void): unknown;
  onExit(cb: (e: { exitCode: number; signal?: number }) => void): unknown;
  write(data: string | Buffer): void;
  resize(cols: number, rows: number): void;
  kill(signal?: string): void;
}

type PtyModule = { spawn: (file: string, args: string[], opts: Record<string, unknown>) => PtyLike };

let ptyModule: Promise<PtyModule> | undefined;
function loadPty(): Promise<PtyModule> {
  ptyModule ??= import("node-pty").then((m) => {
    const mod = m as unknown as PtyModule & { default?: PtyModule };
    return typeof mod.spawn === "function" ? mod : (mod.default as PtyModule);
  });
  return ptyModule;
}

/** Pass uid/gid only when they change something (and we may change them). */
function credentials(uid: number, gid: number): { uid?: number; gid?: number } {
  const myUid = process.getuid?.() ?? -1;
  const myGid = process.getgid?.() ?? -1;
  if (myUid !== 0 && uid === myUid && gid === myGid) return {};
  return { uid, gid };
}

const EXIT_FLUSH_MS = 250;

export class ProcessHandle {
  readonly pid: number;
  readonly config: ProcessConfigInfo;
  readonly tag: string | undefined;
  readonly isPty: boolean;
  end: EndInfo | undefined;
  private readonly listeners = new Set<Listener>();
  private child: ChildProcess | undefined;
  private pty: PtyLike | undefined;
  private lifetimeTimer: NodeJS.Timeout | undefined;
  private readonly exitCallbacks: Array<(h: ProcessHandle) => void> = [];

  private constructor(pid: number, spec: SpawnSpec, child?: ChildProcess, pty?: PtyLike) {
    this.pid = pid;
    this.config = spec.config;
    this.tag = spec.tag;
    this.isPty = pty !== undefined;
    this.child = child;
    this.pty = pty;
  }

  /** Spawn; `first` is subscribed before any output can arrive. */
  static async spawn(spec: SpawnSpec, first?: Listener): Promise<ProcessHandle> {
    return spec.pty ? ProcessHandle.spawnPty(spec, first) : ProcessHandle.spawnPipes(spec, first);
  }

  private static async spawnPipes(spec: SpawnSpec, first?: Listener): Promise<ProcessHandle> {
    const child = spawn(spec.config.cmd, spec.config.args, {
      cwd: spec.cwd,
      env: spec.env,
      ...credentials(spec.uid, spec.gid),
      detached: true,
      stdio: [spec.stdin ? "pipe" : "ignore", "pipe", "pipe"],
      windowsHide: true,
    });
    if (child.pid === undefined) {
      const err = await new Promise<Error>((resolve) => {
        child.once("error", resolve);
        setTimeout(() => resolve(new Error("unknown spawn failure")), 1000);
      });
      throw new ConnectError(`error starting process '${spec.config.cmd}': ${err.message}`, Code.Internal);
    }
    const h = new ProcessHandle(child.pid, spec, child);
    if (first) h.listeners.add(first);
    const onData = (stream: OutputStream) => (chunk: Buffer) => h.emit({ kind: "data", stream, data: chunk });
    child.stdout?.on("data", onData("stdout"));
    child.stderr?.on("data", onData("stderr"));
    child.stdin?.on("error", () => {}); // EPIPE after the child closed its stdin
    child.on("error", (err) => log("warn", "process error", { pid: h.pid, err }));
    let finished = false;
    const finish = (code: number | null, signal: NodeJS.Signals | null) => {
      if (finished) return;
      finished = true;
      child.stdout?.destroy();
      child.stderr?.destroy();
      child.stdin?.destroy();
      h.finish(endFromExit(code, signal));
    };
    child.once("close", finish);
    child.once("exit", (code, signal) => {
      // A grandchild may keep the pipes open; don't wait for it forever.
      setTimeout(() => finish(code, signal), EXIT_FLUSH_MS).unref();
    });
    return h;
  }

  private static async spawnPty(spec: SpawnSpec, first?: Listener): Promise<ProcessHandle> {
    let mod: PtyModule;
    try {
      mod = await loadPty();
    } catch (err) {
      throw new ConnectError(`PTY support is unavailable: ${(err as Error).message}`, Code.Internal);
    }
    let term: PtyLike;
    try {
      term = mod.spawn(spec.config.cmd, spec.config.args, {
        name: "xterm-256color",
        cols: Math.max(1, spec.pty?.cols || 80),
        rows: Math.max(1, spec.pty?.rows || 24),
        cwd: spec.cwd,
        env: spec.env,
        encoding: null,
        ...credentials(spec.uid, spec.gid),
      });
    } catch (err) {
      throw new ConnectError(`error starting PTY process: ${(err as Error).message}`, Code.Internal);
    }
    const h = new ProcessHandle(term.pid, spec, undefined, term);
    if (first) h.listeners.add(first);
    term.onData((d) => {
      const data = typeof d === "string" ? Buffer.from(d, "utf8") : d;
      h.emit({ kind: "data", stream: "pty", data });
    });
    term.onExit(({ exitCode, signal }) => {
      // let trailing output drain first
      setImmediate(() => h.finish(endFromExit(exitCode, signal || null)));
    });
    return h;
  }

  subscribe(fn: Listener): () => void {
    if (this.end) return () => {};
    this.listeners.add(fn);
    return () => this.removeListener(fn);
  }

  removeListener(fn: Listener): void {
    this.listeners.delete(fn);
  }

  onExit(cb: (h: ProcessHandle) => void): void {
    if (this.end) cb(this);
    else this.exitCallbacks.push(cb);
  }

  private emit(ev: ProcEvent): void {
    for (const l of [...this.listeners]) {
      try {
        l(ev);
      } catch (err) {
        log("warn", "listener failed", { pid: this.pid, err });
      }
    }
  }

  private finish(end: EndInfo): void {
    if (this.end) return;
    this.end = end;
    if (this.lifetimeTimer) clearTimeout(this.lifetimeTimer);
    this.emit({ kind: "end", end });
    this.listeners.clear();
    for (const cb of this.exitCallbacks.splice(0)) {
      try {
        cb(this);
      } catch (err) {
        log("warn", "exit callback failed", { pid: this.pid, err });
      }
    }
    log("debug", "process ended", { pid: this.pid, status: end.status });
  }

  /** Kill the process (group) with SIGKILL after `ms`. */
  setLifetime(ms: number): void {
    if (this.end || !(ms > 0)) return;
    if (this.lifetimeTimer) clearTimeout(this.lifetimeTimer);
    this.lifetimeTimer = setTimeout(() => {
      log("info", "process lifetime reached, killing", { pid: this.pid });
      this.signal("SIGKILL");
    }, Math.min(ms, 2_147_000_000));
  }

  /** Signal the whole process group, falling back to the process itself. */
  signal(sig: NodeJS.Signals): void {
    if (this.end) return;
    try {
      process.kill(-this.pid, sig);
      return;
    } catch {
      // no such group (or not its leader): try the pid itself
    }
    try {
      process.kill(this.pid, sig);
    } catch (err) {
      log("debug", "kill failed", { pid: this.pid, err });
    }
  }

  writeStdin(data: Uint8Array): Promise<void> {
    if (this.pty) {
      this.pty.write(Buffer.from(data));
      return Promise.resolve();
    }
    const stdin = this.child?.stdin;
    if (!stdin) return Promise.reject(new ConnectError("stdin is not enabled for this process", Code.FailedPrecondition));
    if (stdin.destroyed || stdin.writableEnded) {
      return Promise.reject(new ConnectError("stdin is closed", Code.FailedPrecondition));
    }
    return new Promise((resolve, reject) => {
      stdin.write(Buffer.from(data), (err) => {
        if (err) reject(new ConnectError(`error writing to stdin: ${err.message}`, Code.Internal));
        else resolve();
      });
    });
  }

  writePty(data: Uint8Array): void {
    if (!this.pty) throw new ConnectError("process has no PTY", Code.FailedPrecondition);
    this.pty.write(Buffer.from(data));
  }

  closeStdin(): void {
    if (this.pty) {
      throw new ConnectError("cannot close stdin of a PTY process, send Ctrl+D (0x04) instead", Code.FailedPrecondition);
    }
    const stdin = this.child?.stdin;
    if (!stdin) throw new ConnectError("stdin is not enabled for this process", Code.FailedPrecondition);
    stdin.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.pty) throw new ConnectError("tty not assigned to process", Code.Internal);
    if (this.end) return;
    this.pty.resize(Math.max(1, cols), Math.max(1, rows));
  }
}
