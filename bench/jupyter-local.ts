/**
 * The code interpreter's baseline: the template's own jupyter-server and Python kernel run
 * straight on the host, no gVisor, no aenv server, no service in between.
 *
 * The template's tree is never written: jupyter runs chrooted into an overlay whose upper
 * layer is a tmpfs, all of it mounted inside a private mount namespace, and in a new PID
 * namespace (`unshare --mount --pid --fork --kill-child`). When jupyter-server (PID 1 there)
 * exits or is killed, the kernel dies with it and the namespace's mounts go away: nothing is
 * left to unmount. The host keeps one empty folder (the mount point), removed by stop().
 *
 * jupyter-server gets the flags the service in the sandbox gives it (kernels over unix
 * sockets, no output rate limits), so the two sides run the same kernel the same way.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtempSync, rmdirSync } from "node:fs";
import WebSocket from "ws";
import { jupyterServerArgs } from "../packages/code-interpreter/src/jupyter.js";
import { freePort } from "../test/helpers/server.js";

interface JupyterMsg {
  header: { msg_id: string; msg_type: string };
  parent_header: { msg_id?: string };
  content: Record<string, unknown>;
}

export interface ExecuteResult {
  /** execute_result's text/plain, when the cell had one. */
  text?: string;
  status: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A shell word, single-quoted. */
const q = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

export class LocalJupyter {
  readonly token = randomBytes(24).toString("hex");
  private proc?: ChildProcess;
  private mnt?: string;
  private ws?: WebSocket;
  private kernelId?: string;
  private readonly session = randomUUID();
  private output = "";
  private pending?: { msgId: string; reply?: string; idle: boolean; text?: string; done: () => void };
  port = 0;

  constructor(private readonly rootfs: string) {}

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The last lines jupyter-server printed, for an error message. */
  logTail(): string {
    return this.output.split("\n").slice(-20).join("\n");
  }

  /** Starts jupyter-server chrooted into the template's tree, then a python3 kernel and its channel. */
  async start(): Promise<void> {
    this.port = await freePort();
    const mnt = mkdtempSync("/var/tmp/aenv-bench-jupyter-");
    this.mnt = mnt;
    const root = `${mnt}/m`;
    // The service's own flags, plus allow_root: the baseline runs as root in its chroot.
    const jupyterArgs = [
      ...jupyterServerArgs(this.port, this.token, "/tmp/aenv-jupyter"),
      "--ServerApp.allow_root=True",
    ];
    const script = [
      "set -e",
      `mount -t tmpfs -o size=512m tmpfs ${q(mnt)}`,
      `mkdir ${q(`${mnt}/u`)} ${q(`${mnt}/w`)} ${q(root)}`,
      `mount -t overlay overlay -o ${q(`lowerdir=${this.rootfs},upperdir=${mnt}/u,workdir=${mnt}/w`)} ${q(root)}`,
      `mount -t proc proc ${q(`${root}/proc`)}`,
      `mount --rbind /dev ${q(`${root}/dev`)}`,
      `mkdir -p -m 700 ${q(`${root}/tmp/aenv-jupyter`)}`,
      `exec chroot ${q(root)} /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ` +
        `HOME=/root LANG=C.UTF-8 PYDEVD_DISABLE_FILE_VALIDATION=1 python3 ${jupyterArgs.join(" ")}`,
    ].join("\n");
    // Its own process group (detached): stop() signals the whole group.
    const proc = spawn(
      "unshare",
      ["--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "sh", "-c", script],
      { detached: true, stdio: ["ignore", "pipe", "pipe"] },
    );
    this.proc = proc;
    proc.stdout?.on("data", (d: Buffer) => (this.output += d.toString()));
    proc.stderr?.on("data", (d: Buffer) => (this.output += d.toString()));
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(`local jupyter-server exited (${proc.exitCode ?? proc.signalCode}):\n${this.logTail()}`);
      try {
        await this.request("GET", "/api/status");
        break;
      } catch {
        if (Date.now() > deadline) throw new Error(`local jupyter-server did not start in 120 s:\n${this.logTail()}`);
        await sleep(100);
      }
    }
    const k = (await this.request("POST", "/api/kernels", { name: "python3", path: "root" })) as { id: string };
    this.kernelId = k.id;
    await this.connect();
    // The kernel answers once it is up; the first answer is not a sample.
    await this.execute("1");
  }

  private async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const r = await fetch(`${this.base}${path}`, {
      method,
      headers: { authorization: `token ${this.token}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`local jupyter ${method} ${path}: ${r.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : undefined;
  }

  private connect(): Promise<void> {
    const url = `ws://127.0.0.1:${this.port}/api/kernels/${this.kernelId}/channels?session_id=${this.session}&token=${this.token}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false });
      ws.once("open", () => {
        this.ws = ws;
        resolve();
      });
      ws.once("error", reject);
      ws.on("message", (data) => this.onMessage(data.toString()));
    });
  }

  private onMessage(raw: string): void {
    const p = this.pending;
    if (!p) return;
    let msg: JupyterMsg;
    try {
      msg = JSON.parse(raw) as JupyterMsg;
    } catch {
      return;
    }
    if (msg.parent_header.msg_id !== p.msgId) return;
    const c = msg.content;
    if (msg.header.msg_type === "execute_result") {
      const data = c.data as Record<string, unknown> | undefined;
      if (typeof data?.["text/plain"] === "string") p.text = data["text/plain"];
    } else if (msg.header.msg_type === "execute_reply") {
      p.reply = String(c.status ?? "");
    } else if (msg.header.msg_type === "status" && c.execution_state === "idle") {
      p.idle = true;
    }
    if (p.reply !== undefined && p.idle) p.done();
  }

  /**
   * One execute_request on the shell channel; resolves on its execute_reply and the kernel's
   * idle status (what the service in the sandbox waits for before it answers a cell).
   */
  execute(code: string, timeoutMs = 60_000): Promise<ExecuteResult> {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("local kernel not connected"));
    const msgId = randomUUID();
    return new Promise<ExecuteResult>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending = undefined;
        reject(new Error(`local kernel did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const p: NonNullable<LocalJupyter["pending"]> = {
        msgId,
        idle: false,
        done: () => {
          clearTimeout(timer);
          this.pending = undefined;
          resolve({ status: p.reply ?? "", ...(p.text !== undefined ? { text: p.text } : {}) });
        },
      };
      this.pending = p;
      ws.send(
        JSON.stringify({
          header: {
            msg_id: msgId,
            msg_type: "execute_request",
            username: "bench",
            session: this.session,
            date: new Date().toISOString(),
            version: "5.3",
          },
          parent_header: {},
          metadata: {},
          content: {
            code,
            silent: false,
            store_history: true,
            user_expressions: {},
            allow_stdin: false,
            stop_on_error: true,
          },
          channel: "shell",
          buffers: [],
        }),
      );
    });
  }

  /** Stops jupyter-server and its kernel (the whole process group, then its PID namespace) and removes the mount point. */
  async stop(): Promise<void> {
    this.ws?.terminate();
    const proc = this.proc;
    if (proc?.pid !== undefined && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((r) => proc.once("exit", () => r()));
      const signal = (sig: NodeJS.Signals) => {
        try {
          process.kill(-(proc.pid as number), sig);
        } catch {
          // the group is gone
        }
      };
      signal("SIGTERM");
      if (!(await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]))) {
        signal("SIGKILL");
        await exited;
      }
    }
    this.proc = undefined;
    // Its mounts lived in the namespace that just ended: the folder is empty again. Never a
    // recursive removal here: were a mount still in place, it would reach into /dev.
    if (this.mnt) {
      try {
        rmdirSync(this.mnt);
      } catch {
        // not empty or gone: left for whoever looks
      }
    }
    this.mnt = undefined;
  }
}
