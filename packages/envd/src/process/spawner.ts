/**
 * Starts commands through aenv-init's spawn service (init/aenv-init.c): vfork + exec in PID 1,
 * where libuv would fork envd's whole address space (about twice the cost inside gVisor).
 * Each command's stdout, stderr and stdin are unix sockets init connects to a private socket
 * of envd's and hands to the child, so the rest of envd sees what Node's spawn gives: a pid,
 * three streams, "exit" and then "close". Outside aenv-init (tests) `aenv-init --spawner`
 * runs as a child of envd's instead.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { constants, tmpdir } from "node:os";
import path from "node:path";
import type { Readable, Writable } from "node:stream";
import { log } from "../log.js";
import { nulFrame } from "../nul-frame.js";
import { signalName } from "./signals.js";

export interface SpawnRequest {
  cmd: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  uid?: number;
  gid?: number;
  stdin: boolean;
}

/** What ProcessHandle uses of a child: Node's ChildProcess has it, and so does a helper-started one. */
export interface ChildLike {
  readonly pid?: number | undefined;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdin: Writable | null;
  on(ev: "error", fn: (err: Error) => void): unknown;
  once(ev: "error", fn: (err: Error) => void): unknown;
  once(ev: "exit" | "close", fn: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
}

/** Header the helper writes first on each stream socket: 32 hex digits, a space, o|e|i, newline. */
const HEADER_BYTES = 35;
/** A request whose streams and pid did not all arrive by then failed. */
const SPAWN_TIMEOUT_MS = 10_000;

interface Pending {
  id: number;
  cmd: string;
  needStdin: boolean;
  streams: { o?: Socket; e?: Socket; i?: Socket };
  pid?: number;
  /** Raw wait status of a child that ended before all its streams were accepted. */
  status?: number;
  settle: (err: Error | undefined) => void;
}

class HelperChild extends EventEmitter {
  readonly pid: number;
  readonly stdout: Socket;
  readonly stderr: Socket;
  readonly stdin: Socket | null;
  private exit: [number | null, NodeJS.Signals | null] | undefined;
  private open = 2;

  constructor(pid: number, s: Pending["streams"]) {
    super();
    this.pid = pid;
    this.stdout = s.o as Socket;
    this.stderr = s.e as Socket;
    this.stdin = s.i ?? null;
    // Reading only: the child never reads from its stdout/stderr sockets.
    for (const sock of [this.stdout, this.stderr]) {
      sock.on("error", () => {});
      if (sock.closed) this.open--;
      else
        sock.once("close", () => {
          this.open--;
          this.maybeClose();
        });
    }
  }

  ended(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exit) return;
    this.exit = [code, signal];
    this.emit("exit", code, signal);
    this.maybeClose();
  }

  private maybeClose(): void {
    if (this.exit && this.open === 0) this.emit("close", ...this.exit);
  }
}

/** The helper could not start it (not the command's fault): start it another way. */
export class HelperUnusable extends Error {}

function errnoName(n: number): string {
  for (const [name, v] of Object.entries(constants.errno)) if (v === n) return name;
  return `errno ${n}`;
}

function checkNoNul(what: string, v: string): void {
  if (v.includes("\0")) throw new TypeError(`${what} must be a string without null bytes`);
}

export class Spawner {
  private readonly server: Server;
  private readonly sock: string;
  private readonly dir: string;
  private readonly send: (b: Buffer) => void;
  private readonly stopHelper: () => void;
  private readonly pending = new Map<string, Pending>();
  private readonly byId = new Map<number, Pending>();
  private readonly children = new Map<number, HelperChild>();
  private nextId = 1;
  private lines = "";
  private dead = false;
  private readonly listening: Promise<void>;

  private constructor(channel: { helper: string } | { socket: string }) {
    // A private (0700, root's) directory: only envd and init can reach the socket. /dev/shm
    // first: a tmpfs the sandbox always has, outside the files a filesystem-only pause keeps.
    const base = ["/dev/shm", tmpdir()].find((d) => existsSync(d)) ?? tmpdir();
    this.dir = mkdtempSync(path.join(base, ".aenv-spawn-"));
    this.sock = path.join(this.dir, "s");
    this.server = createServer((s) => this.accept(s));
    this.listening = new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.sock, () => resolve());
    });
    this.listening.catch(() => this.fail("spawn socket not listening"));
    const onData = (d: string) => this.onLines(d);
    if ("helper" in channel) {
      const helper = spawn(channel.helper, ["--spawner"], { stdio: ["pipe", "pipe", "inherit"] });
      helper.on("error", (err) => this.fail(`spawn helper failed: ${err.message}`));
      helper.on("exit", (code, signal) => this.fail(`spawn helper ended (${code ?? signal})`));
      helper.stdin?.on("error", () => {});
      helper.stdout?.setEncoding("utf8");
      helper.stdout?.on("data", onData);
      this.send = (b) => helper.stdin?.write(b);
      this.stopHelper = () => helper.stdin?.end();
    } else {
      const ctl = connect(channel.socket);
      ctl.on("error", (err) => this.fail(`spawn service unreachable: ${err.message}`));
      ctl.on("close", () => this.fail("spawn service closed"));
      ctl.setEncoding("utf8");
      ctl.on("data", onData);
      this.send = (b) => ctl.write(b);
      this.stopHelper = () => ctl.end();
    }
  }

  /** aenv-init's spawn service (AENV_SPAWN_SOCKET), or undefined (then Node's spawn is used). */
  static connect(socket: string): Spawner | undefined {
    try {
      return new Spawner({ socket });
    } catch (err) {
      log("warn", "spawn service not reachable", { err });
      return undefined;
    }
  }

  /** A spawner using the helper at this path, or undefined (then Node's spawn is used). */
  static start(helperPath: string): Spawner | undefined {
    try {
      return new Spawner({ helper: helperPath });
    } catch (err) {
      log("warn", "spawn helper not started", { err });
      return undefined;
    }
  }

  get usable(): boolean {
    return !this.dead;
  }

  async spawn(req: SpawnRequest): Promise<ChildLike> {
    checkNoNul("cmd", req.cmd);
    for (const [i, a] of req.args.entries()) checkNoNul(`args[${i}]`, a);
    const envPairs = Object.entries(req.env).map(([k, v]) => {
      const kv = `${k}=${v}`;
      checkNoNul(`env ${k}`, kv);
      return kv;
    });
    checkNoNul("cwd", req.cwd);
    await this.listening;
    if (this.dead) throw new HelperUnusable("spawn helper is not running");
    const id = this.nextId++;
    const nonce = randomBytes(16).toString("hex");
    const fields = [
      String(id),
      nonce,
      this.sock,
      String(req.uid ?? -1),
      String(req.gid ?? -1),
      req.cwd,
      req.stdin ? "1" : "0",
      String(1 + req.args.length),
      req.cmd,
      ...req.args,
      String(envPairs.length),
      ...envPairs,
    ];
    const msg = nulFrame(fields);
    return new Promise<ChildLike>((resolve, reject) => {
      const timer = setTimeout(() => {
        p.settle(new HelperUnusable("spawn helper did not answer"));
        this.fail("spawn helper did not answer");
      }, SPAWN_TIMEOUT_MS);
      const p: Pending = {
        id,
        cmd: req.cmd,
        needStdin: req.stdin,
        streams: {},
        settle: (err) => {
          clearTimeout(timer);
          this.pending.delete(nonce);
          this.byId.delete(id);
          if (err) {
            for (const s of Object.values(p.streams)) s?.destroy();
            if (p.pid !== undefined) {
              try {
                process.kill(p.pid, "SIGKILL");
              } catch {}
            }
            reject(err);
            return;
          }
          const child = new HelperChild(p.pid as number, p.streams);
          this.children.set(child.pid, child);
          child.once("exit", () => this.children.delete(child.pid));
          resolve(child);
          // Ended already (a quick command, streams accepted late): once its handle listens.
          const status = p.status;
          if (status !== undefined) setImmediate(() => this.ended(child, status));
        },
      };
      this.pending.set(nonce, p);
      this.byId.set(id, p);
      this.send(msg);
    });
  }

  private complete(p: Pending): void {
    const s = p.streams;
    if (p.pid !== undefined && s.o && s.e && (!p.needStdin || s.i)) p.settle(undefined);
  }

  /** A stream socket from the helper: its header names the request and the stream. */
  private accept(sock: Socket): void {
    sock.on("error", () => {});
    const guard = setTimeout(() => sock.destroy(), SPAWN_TIMEOUT_MS);
    const onReadable = () => {
      const h = sock.read(HEADER_BYTES) as Buffer | null;
      if (h === null) return;
      sock.off("readable", onReadable);
      clearTimeout(guard);
      const m = /^([0-9a-f]{32}) ([oei])\n$/.exec(h.toString("latin1"));
      const p = m ? this.pending.get(m[1] as string) : undefined;
      const kind = m?.[2] as "o" | "e" | "i" | undefined;
      if (!p || !kind || p.streams[kind]) {
        sock.destroy();
        return;
      }
      p.streams[kind] = sock;
      this.complete(p);
    };
    sock.on("readable", onReadable);
  }

  private onLines(d: string): void {
    this.lines += d;
    let nl = this.lines.indexOf("\n");
    while (nl >= 0) {
      const line = this.lines.slice(0, nl);
      this.lines = this.lines.slice(nl + 1);
      this.onLine(line);
      nl = this.lines.indexOf("\n");
    }
  }

  private onLine(line: string): void {
    const [kind, a, b] = line.split(" ");
    const x = Number(a);
    const y = Number(b);
    if (kind === "P") {
      const p = this.byId.get(x);
      if (!p) return;
      p.pid = y;
      this.complete(p);
    } else if (kind === "F") {
      const p = this.byId.get(x);
      if (!p) return;
      p.settle(new HelperUnusable(`spawn helper could not connect: ${errnoName(y)}`));
      this.fail("spawn helper could not connect");
    } else if (kind === "E") {
      const p = this.byId.get(x);
      if (!p) return;
      const code = errnoName(y);
      const err = Object.assign(new Error(`spawn ${p.cmd} ${code}`), { code, errno: -y, syscall: `spawn ${p.cmd}` });
      p.settle(err);
    } else if (kind === "X") {
      const child = this.children.get(x);
      if (child) this.ended(child, y);
      // Its streams may not all have been accepted yet: the exit waits for them.
      else for (const p of this.pending.values()) if (p.pid === x) p.status = y;
    }
  }

  /** Raw wait status: exited (low 7 bits 0) or killed by a signal (low 7 bits). */
  private ended(child: HelperChild, status: number): void {
    const sig = status & 0x7f;
    if (sig === 0) child.ended((status >> 8) & 0xff, null);
    else child.ended(null, signalName(sig) as NodeJS.Signals);
  }

  /** The helper is gone: what waits fails, and commands are started by Node from now on. */
  private fail(why: string): void {
    if (this.dead) return;
    this.dead = true;
    log("warn", "spawn helper unusable; using Node's spawn", { why });
    for (const p of [...this.pending.values()]) p.settle(new HelperUnusable(why));
    // Their exit status is lost with the helper: they end when their output does.
    for (const c of this.children.values()) c.stdout.once("close", () => c.ended(-1, null));
    this.removeSocket();
  }

  close(): void {
    this.dead = true;
    this.stopHelper();
    this.removeSocket();
  }

  private removeSocket(): void {
    this.server.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
