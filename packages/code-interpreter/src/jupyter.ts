import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";

/**
 * jupyter-server's command line (after `python3`) as the service runs it; the benchmark's local
 * baseline runs the same one.
 */
export function jupyterServerArgs(port: number, token: string, ipcDir: string): string[] {
  return [
    "-m",
    "jupyter_server",
    "--ServerApp.ip=127.0.0.1",
    `--ServerApp.port=${port}`,
    "--ServerApp.port_retries=0",
    `--ServerApp.token=${token}`,
    "--ServerApp.open_browser=False",
    "--ServerApp.root_dir=/",
    // Kernels talk to the server over unix sockets, not loopback TCP: runsc resets TCP
    // connections when it checkpoints (a warm image, a pause, a fork), and ZeroMQ over a
    // reset connection crashed jupyter-server and its kernels in restored sandboxes.
    "--KernelManager.transport=ipc",
    `--KernelManager.ip=${ipcDir}/kernel`,
    // Output is streamed to the client as it comes; the service caps it per cell instead.
    "--ServerApp.iopub_data_rate_limit=1e12",
    "--ServerApp.iopub_msg_rate_limit=1e9",
  ];
}

/**
 * A jupyter-server on loopback: it owns the Python kernels (start, interrupt, restart and the
 * automatic restart of a kernel that died) and relays their messages over WebSocket, so the
 * service needs no ZeroMQ of its own.
 */
export class JupyterServer {
  readonly token = randomBytes(24).toString("hex");
  private proc?: ChildProcess;
  constructor(
    readonly port: number,
    private readonly ipcDir: string,
  ) {}

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  wsUrl(kernelId: string, session: string): string {
    return `ws://127.0.0.1:${this.port}/api/kernels/${kernelId}/channels?session_id=${session}&token=${this.token}`;
  }

  /** Called when jupyter-server exits on its own: its kernels are gone with it. */
  onExit?: () => void;

  async start(log: (m: string) => void): Promise<void> {
    mkdirSync(this.ipcDir, { recursive: true, mode: 0o700 });
    const args = jupyterServerArgs(this.port, this.token, this.ipcDir);
    const proc = spawn("python3", args, {
      stdio: ["ignore", "inherit", "inherit"],
      env: { ...process.env, PYDEVD_DISABLE_FILE_VALIDATION: "1" },
    });
    this.proc = proc;
    proc.on("exit", (code, sig) => {
      log(`jupyter-server exited (${code ?? sig})`);
      this.onExit?.();
    });
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`jupyter-server exited ${proc.exitCode}`);
      try {
        await this.request("GET", "/api/status");
        return;
      } catch {
        if (Date.now() > deadline) throw new Error("jupyter-server did not start within 120 s");
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  alive(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const r = await fetch(`${this.base}${path}`, {
      method,
      headers: { authorization: `token ${this.token}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`jupyter ${method} ${path}: ${r.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : undefined;
  }

  /** A new kernel whose working directory is cwd (a path relative to root_dir "/"). */
  async startKernel(name: string, cwd: string): Promise<string> {
    const k = (await this.request("POST", "/api/kernels", { name, path: cwd.replace(/^\/+/, "") })) as { id: string };
    return k.id;
  }

  interrupt(id: string): Promise<unknown> {
    return this.request("POST", `/api/kernels/${id}/interrupt`);
  }

  restart(id: string): Promise<unknown> {
    return this.request("POST", `/api/kernels/${id}/restart`);
  }

  shutdown(id: string): Promise<unknown> {
    return this.request("DELETE", `/api/kernels/${id}`);
  }
}
