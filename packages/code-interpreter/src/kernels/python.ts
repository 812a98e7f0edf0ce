import { randomUUID } from "node:crypto";
import WebSocket from "ws";
import type { JupyterServer } from "../jupyter.js";
import { now, resultLine } from "../results.js";
import CHARTS_PY from "./charts.py";
import { type Kernel, Queue, type Sink } from "./kernel.js";

interface JupyterMsg {
  header: { msg_id: string; msg_type: string };
  parent_header: { msg_id?: string };
  channel?: string;
  content: Record<string, unknown>;
}

interface Pending {
  msgId: string;
  sink?: Sink;
  gotReply: boolean;
  gotIdle: boolean;
  count?: number;
  done: (err?: Error) => void;
}

/** A Python string literal holding s (JSON's escapes are Python's). */
function pyStr(s: string): string {
  return JSON.stringify(s);
}

/** How long an interrupted cell may take to stop before its kernel is restarted. */
const INTERRUPT_GRACE_MS = 3000;
/** How long the service's own setup code may take: a fresh kernel answers within a second or two. */
const SILENT_TIMEOUT_MS = 5_000;

/** An ipykernel behind the local jupyter-server, spoken to over its WebSocket channels. */
export class PythonKernel implements Kernel {
  readonly language = "python";
  private ws?: WebSocket;
  private readonly session = randomUUID();
  private pending?: Pending;
  private readonly queue = new Queue();
  /** Set by the kernel restarting under us: the next cell first puts the context back. */
  private needsSetup = false;
  private sandboxEnv: Record<string, string> = {};

  private constructor(
    private readonly jupyter: JupyterServer,
    private readonly id: string,
    private readonly cwd: string,
  ) {}

  static async start(jupyter: JupyterServer, cwd: string): Promise<PythonKernel> {
    const k = new PythonKernel(jupyter, await jupyter.startKernel("python3", cwd), cwd);
    await k.connect();
    await k.setup();
    return k;
  }

  private connect(): Promise<void> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.jupyter.wsUrl(this.id, this.session), { perMessageDeflate: false });
      ws.once("open", () => {
        this.ws = ws;
        resolve();
      });
      ws.once("error", reject);
      ws.on("message", (data) => this.onMessage(data.toString()));
      ws.on("close", () => {
        if (this.ws !== ws) return;
        this.ws = undefined;
        this.pending?.done(new Error("kernel connection closed"));
      });
    });
  }

  private onMessage(raw: string): void {
    let msg: JupyterMsg;
    try {
      msg = JSON.parse(raw) as JupyterMsg;
    } catch {
      return;
    }
    const p = this.pending;
    const type = msg.header.msg_type;
    if (type === "status") {
      const state = msg.content.execution_state;
      // The kernel died (os._exit, OOM, a segfault) and jupyter-server restarts it.
      if (state === "restarting" || state === "dead") {
        this.needsSetup = true;
        if (p) {
          p.sink?.({
            type: "error",
            name: "KernelDied",
            value: "the kernel died while running this cell and was restarted; its state is lost",
            traceback: "",
          });
          p.done();
        }
        return;
      }
    }
    if (!p || msg.parent_header.msg_id !== p.msgId) return;
    const c = msg.content;
    switch (type) {
      case "stream":
        p.sink?.({ type: c.name === "stderr" ? "stderr" : "stdout", text: String(c.text ?? ""), timestamp: now() });
        break;
      case "execute_result":
        p.sink?.(resultLine((c.data ?? {}) as Record<string, unknown>, true));
        break;
      case "display_data":
        p.sink?.(resultLine((c.data ?? {}) as Record<string, unknown>, false));
        break;
      case "error":
        p.sink?.({
          type: "error",
          name: String(c.ename ?? "Error"),
          value: String(c.evalue ?? ""),
          traceback: Array.isArray(c.traceback) ? c.traceback.join("\n") : "",
        });
        break;
      case "execute_reply":
        p.gotReply = true;
        if (typeof c.execution_count === "number") p.count = c.execution_count;
        break;
      case "status":
        if (c.execution_state === "idle") p.gotIdle = true;
        break;
    }
    if (p.gotReply && p.gotIdle) {
      // Last, as E2B's server sends it: after every output of the cell.
      if (p.count !== undefined) p.sink?.({ type: "number_of_executions", execution_count: p.count });
      p.done();
    }
  }

  /** Runs code and waits for the kernel to be idle again; sink gets what a user should see. */
  private run(code: string, sink: Sink | undefined, signal?: AbortSignal): Promise<void> {
    // Our own (silent) code is short: no answer means the kernel is not there (restarting).
    const limit = sink === undefined ? AbortSignal.timeout(SILENT_TIMEOUT_MS) : undefined;
    return new Promise<void>((resolve, reject) => {
      const ws = this.ws;
      if (!ws || ws.readyState !== WebSocket.OPEN) {
        reject(new Error("kernel is not connected"));
        return;
      }
      const msgId = randomUUID();
      let interruptTimer: NodeJS.Timeout | undefined;
      const onLimit = () => finish(new Error("kernel did not answer"));
      const onAbort = () => {
        this.jupyter.interrupt(this.id).catch(() => undefined);
        // A cell stuck where Python cannot be interrupted (inside C code) loses its kernel.
        interruptTimer = setTimeout(() => {
          this.needsSetup = true;
          this.jupyter.restart(this.id).catch(() => undefined);
          finish();
        }, INTERRUPT_GRACE_MS);
      };
      const finish = (err?: Error) => {
        if (this.pending?.msgId !== msgId) return;
        this.pending = undefined;
        clearTimeout(interruptTimer);
        signal?.removeEventListener("abort", onAbort);
        limit?.removeEventListener("abort", onLimit);
        if (err) reject(err);
        else resolve();
      };
      this.pending = { msgId, gotReply: false, gotIdle: false, done: finish, ...(sink ? { sink } : {}) };
      signal?.addEventListener("abort", onAbort, { once: true });
      limit?.addEventListener("abort", onLimit, { once: true });
      const silent = sink === undefined;
      ws.send(
        JSON.stringify({
          header: {
            msg_id: msgId,
            msg_type: "execute_request",
            session: this.session,
            username: "aenv",
            version: "5.3",
            date: new Date().toISOString(),
          },
          parent_header: {},
          metadata: {},
          channel: "shell",
          content: {
            code,
            silent,
            store_history: !silent,
            user_expressions: {},
            allow_stdin: false,
            stop_on_error: true,
          },
        }),
      );
      if (signal?.aborted) onAbort();
    });
  }

  /**
   * What a fresh (or restarted) kernel needs: its folder, the chart formatter for matplotlib
   * figures (charts.py, in a namespace of its own) and the sandbox's variables.
   */
  private async setup(): Promise<void> {
    this.needsSetup = false;
    await this.run(
      [
        `import os as __aenv_os\n__aenv_os.chdir(${pyStr(this.cwd)})`,
        `exec(compile(${pyStr(CHARTS_PY)}, "<aenv charts>", "exec"), {"__name__": "__aenv_charts__"})`,
      ].join("\n"),
      undefined,
    );
    if (Object.keys(this.sandboxEnv).length) await this.applyEnv(this.sandboxEnv);
  }

  private applyEnv(env: Record<string, string>): Promise<void> {
    return this.run(
      `import os as __aenv_os, json as __aenv_json\n__aenv_os.environ.update(__aenv_json.loads(${pyStr(JSON.stringify(env))}))`,
      undefined,
    );
  }

  execute(code: string, env: Record<string, string>, sink: Sink, signal: AbortSignal): Promise<void> {
    return this.queue.run(async () => {
      if (signal.aborted) return;
      if (this.needsSetup || !this.ws) await this.reconnect();
      const keys = Object.keys(env);
      // Per-run variables: set for this cell, then put back as they were.
      if (keys.length) {
        await this.run(
          `import os as __aenv_os, json as __aenv_json\n__aenv_saved = {k: __aenv_os.environ.get(k) for k in __aenv_json.loads(${pyStr(JSON.stringify(keys))})}\n__aenv_os.environ.update(__aenv_json.loads(${pyStr(JSON.stringify(env))}))`,
          undefined,
        );
      }
      try {
        await this.run(code, sink, signal);
      } finally {
        if (keys.length && !this.needsSetup && this.ws) {
          await this.run(
            "for __k, __v in __aenv_saved.items():\n    if __v is None: __aenv_os.environ.pop(__k, None)\n    else: __aenv_os.environ[__k] = __v",
            undefined,
          ).catch(() => undefined);
        }
      }
    });
  }

  /**
   * After a restart (ours or jupyter-server's, of a kernel that died) the kernel may listen
   * on new ports: a new connection once it is up, then the context is set up again.
   */
  private async reconnect(): Promise<void> {
    const old = this.ws;
    this.ws = undefined;
    old?.close();
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        const k = (await this.jupyter.request("GET", `/api/kernels/${this.id}`)) as { execution_state?: string };
        if (k.execution_state !== "restarting" && k.execution_state !== "starting") {
          await this.connect();
          await this.setup();
          return;
        }
      } catch (err) {
        if (Date.now() > deadline) throw err;
      }
      if (Date.now() > deadline) throw new Error("kernel did not come back within 60 s");
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  setEnv(env: Record<string, string>): Promise<void> {
    this.sandboxEnv = { ...this.sandboxEnv, ...env };
    return this.queue.run(() => this.applyEnv(env));
  }

  reseed(): Promise<void> {
    // Modules a cell already imported hold generator state copied from the parent; numpy's
    // legacy global generator is reseeded only where numpy is loaded (importing it costs).
    return this.queue.run(() =>
      this.run(
        [
          "import os as __aenv_os, random as __aenv_random, sys as __aenv_sys",
          "__aenv_random.seed(__aenv_os.urandom(32))",
          "if 'numpy.random' in __aenv_sys.modules:",
          "    __aenv_sys.modules['numpy.random'].seed([int.from_bytes(__aenv_os.urandom(4), 'little') for _ in range(8)])",
        ].join("\n"),
        undefined,
      ),
    );
  }

  restart(): Promise<void> {
    return this.queue.run(async () => {
      await this.jupyter.restart(this.id);
      await this.reconnect();
    });
  }

  async shutdown(): Promise<void> {
    this.ws?.close();
    await this.jupyter.shutdown(this.id).catch(() => undefined);
  }
}
