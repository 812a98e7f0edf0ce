/** One running (or finished) process: pipes or a PTY, live subscribers, exit status. */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { log } from "../log.js";
import { type EndInfo, endFromExit } from "./signals.js";
import { type ChildLike, HelperUnusable, type Spawner } from "./spawner.js";

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
  pause(): void;
  resume(): void;
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

const SETPRIV_PATHS = ["/usr/bin/setpriv", "/bin/setpriv"];
let setprivPath: string | null | undefined;

/**
 * node-pty switches uid/gid without setgroups(), so a PTY child would keep envd's (root's)
 * supplementary groups. When util-linux setpriv exists, it drops them (like libuv does for
 * pipe processes) before exec'ing the command; the pid stays the same.
 */
function ptyLaunch(spec: SpawnSpec): { file: string; args: string[]; creds: { uid?: number; gid?: number } } {
  const direct = { file: spec.config.cmd, args: spec.config.args, creds: credentials(spec.uid, spec.gid) };
  if (process.getuid?.() !== 0 || (spec.uid === 0 && spec.gid === 0)) return direct;
  if (setprivPath === undefined) setprivPath = SETPRIV_PATHS.find((p) => existsSync(p)) ?? null;
  if (!setprivPath) return direct;
  return {
    file: setprivPath,
    args: [
      "--reuid",
      String(spec.uid),
      "--regid",
      String(spec.gid),
      "--clear-groups",
      "--",
      spec.config.cmd,
      ...spec.config.args,
    ],
    creds: {},
  };
}

const EXIT_FLUSH_MS = 250;
const EXIT_DRAIN_MAX_MS = 5000;

export class ProcessHandle {
  readonly pid: number;
  readonly config: ProcessConfigInfo;
  readonly tag: string | undefined;
  readonly isPty: boolean;
  end: EndInfo | undefined;
  private readonly listeners = new Set<Listener>();
  private child: ChildLike | undefined;
  private pty: PtyLike | undefined;
  private lifetimeTimer: NodeJS.Timeout | undefined;
  private readonly exitCallbacks: Array<(h: ProcessHandle) => void> = [];
  /** Number of subscribers whose queues are full; output reading pauses while > 0. */
  private _congestion = 0;

  private constructor(pid: number, spec: SpawnSpec, child?: ChildLike, pty?: PtyLike) {
    this.pid = pid;
    this.config = spec.config;
    this.tag = spec.tag;
    this.isPty = pty !== undefined;
    this.child = child;
    this.pty = pty;
  }

  /** Spawn; `first` is subscribed before any output can arrive. */
  static async spawn(spec: SpawnSpec, first?: Listener, spawner?: Spawner): Promise<ProcessHandle> {
    return spec.pty ? ProcessHandle.spawnPty(spec, first) : ProcessHandle.spawnPipes(spec, first, spawner);
  }

  /** Through the spawn helper where it runs (vfork: cheaper in gVisor), else Node's spawn. */
  private static async startPipes(spec: SpawnSpec, spawner: Spawner | undefined): Promise<ChildLike> {
    if (spawner?.usable) {
      try {
        return await spawner.spawn({
          cmd: spec.config.cmd,
          args: spec.config.args,
          cwd: spec.cwd,
          env: spec.env,
          ...credentials(spec.uid, spec.gid),
          stdin: spec.stdin,
        });
      } catch (err) {
        if (!(err instanceof HelperUnusable)) {
          throw new ConnectError(
            `error starting process '${spec.config.cmd}': ${(err as Error).message}`,
            Code.Internal,
          );
        }
        log("warn", "spawn helper failed; using Node's spawn", { err });
      }
    }
    let child: ChildLike;
    try {
      child = spawn(spec.config.cmd, spec.config.args, {
        cwd: spec.cwd,
        env: spec.env,
        ...credentials(spec.uid, spec.gid),
        detached: true, // own session and process group, so signals reach the whole tree
        stdio: [spec.stdin ? "pipe" : "ignore", "pipe", "pipe"],
        windowsHide: true,
      });
    } catch (err) {
      throw new ConnectError(`error starting process '${spec.config.cmd}': ${(err as Error).message}`, Code.Internal);
    }
    if (child.pid === undefined) {
      const err = await new Promise<Error>((resolve) => {
        child.once("error", resolve);
        setTimeout(() => resolve(new Error("unknown spawn failure")), 1000);
      });
      throw new ConnectError(`error starting process '${spec.config.cmd}': ${err.message}`, Code.Internal);
    }
    return child;
  }

  private static async spawnPipes(spec: SpawnSpec, first: Listener | undefined, spawner: Spawner | undefined) {
    const child = await ProcessHandle.startPipes(spec, spawner);
    const h = new ProcessHandle(child.pid as number, spec, child);
    if (first) h.listeners.add(first);
    let lastDataAt = Date.now();
    const onData = (stream: OutputStream) => (chunk: Buffer) => {
      lastDataAt = Date.now();
      h.emit({ kind: "data", stream, data: chunk });
    };
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
      // Normally "close" follows at once. A grandchild may keep the pipes open, though: then
      // finish once output went quiet (or after EXIT_DRAIN_MAX_MS), but never while a slow
      // client is still being fed (reading is paused then, and output would be lost).
      const exitedAt = Date.now();
      const check = () => {
        if (finished) return;
        const now = Date.now();
        const quiet = now - lastDataAt >= EXIT_FLUSH_MS || now - exitedAt >= EXIT_DRAIN_MAX_MS;
        if (h.congestion !== 0 || !quiet) {
          setTimeout(check, 100).unref();
          return;
        }
        // Timers run before the loop polls for I/O: output that arrived while envd was busy
        // (a restored sandbox faulting its pages in, a loaded host) is only read in the poll
        // phase after this one. Decided after it, so such output is sent, not dropped.
        const seen = lastDataAt;
        setImmediate(() => {
          if (finished) return;
          if (lastDataAt === seen && h.congestion === 0) finish(code, signal);
          else setTimeout(check, 100).unref();
        });
      };
      setTimeout(check, EXIT_FLUSH_MS).unref();
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
    const launch = ptyLaunch(spec);
    try {
      term = mod.spawn(launch.file, launch.args, {
        name: "xterm-256color",
        cols: Math.max(1, spec.pty?.cols || 80),
        rows: Math.max(1, spec.pty?.rows || 24),
        cwd: spec.cwd,
        env: spec.env,
        encoding: null,
        ...launch.creds,
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

  get congestion(): number {
    return this._congestion;
  }

  /** Flow control: +1 when a subscriber falls behind, -1 when it caught up (or left). */
  throttle(delta: 1 | -1): void {
    const before = this._congestion;
    this._congestion = Math.max(0, this._congestion + delta);
    if (this.end || before > 0 === this._congestion > 0) return;
    const paused = this._congestion > 0;
    try {
      if (this.pty) {
        if (paused) this.pty.pause();
        else this.pty.resume();
      } else {
        for (const s of [this.child?.stdout, this.child?.stderr]) {
          if (paused) s?.pause();
          else s?.resume();
        }
      }
    } catch (err) {
      log("debug", "flow control failed", { pid: this.pid, err });
    }
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
    this.lifetimeTimer = setTimeout(
      () => {
        log("info", "process lifetime reached, killing", { pid: this.pid });
        this.signal("SIGKILL");
      },
      Math.min(ms, 2_147_000_000),
    );
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

  private ptyWrite(pty: PtyLike, data: Uint8Array): void {
    try {
      pty.write(Buffer.from(data));
    } catch (err) {
      throw new ConnectError(`error writing to the PTY: ${(err as Error).message}`, Code.Internal);
    }
  }

  writeStdin(data: Uint8Array): Promise<void> {
    if (this.pty) {
      try {
        this.ptyWrite(this.pty, data);
      } catch (err) {
        return Promise.reject(err);
      }
      return Promise.resolve();
    }
    const stdin = this.child?.stdin;
    if (!stdin) return Promise.reject(new ConnectError("stdin is not enabled for this process", Code.Internal));
    if (stdin.destroyed || stdin.writableEnded) {
      return Promise.reject(new ConnectError("stdin is closed", Code.Internal));
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
    this.ptyWrite(this.pty, data);
  }

  closeStdin(): void {
    if (this.pty) {
      throw new ConnectError(
        "cannot close stdin of a PTY process, send Ctrl+D (0x04) instead",
        Code.FailedPrecondition,
      );
    }
    const stdin = this.child?.stdin;
    if (!stdin) throw new ConnectError("stdin is not enabled for this process", Code.Internal);
    stdin.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.pty) throw new ConnectError("tty not assigned to process", Code.Internal);
    if (this.end) return;
    try {
      this.pty.resize(Math.max(1, cols), Math.max(1, rows));
    } catch (err) {
      throw new ConnectError(`error resizing the PTY: ${(err as Error).message}`, Code.Internal);
    }
  }
}
