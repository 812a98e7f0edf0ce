import { request } from "node:http";
import { ENVD_PORT } from "@aenv/protocol";

export interface ProcessSpec {
  cmd: string;
  args: string[];
  envs?: Record<string, string>;
  cwd?: string;
  /** Linux user to run as (envd's Basic-auth user selection); envd's default otherwise. */
  user?: string;
  token?: string;
  /** Kills the process after this long (Connect-Timeout-Ms is the process lifetime). */
  timeoutMs?: number;
}

export interface ProcessEnd {
  exitCode: number;
  error?: string;
}

interface StartEvent {
  event?: {
    start?: { pid?: number };
    data?: { stdout?: string; stderr?: string };
    end?: { exitCode?: number; exited?: boolean; status?: string; error?: string };
  };
  error?: { code?: string; message?: string };
}

function startRequest(spec: ProcessSpec) {
  const payload = Buffer.from(
    JSON.stringify({
      process: { cmd: spec.cmd, args: spec.args, envs: spec.envs ?? {}, ...(spec.cwd ? { cwd: spec.cwd } : {}) },
      stdin: false,
    }),
  );
  const frame = Buffer.alloc(5 + payload.length);
  frame.writeUInt32BE(payload.length, 1);
  payload.copy(frame, 5);
  const headers: Record<string, string> = {
    "content-type": "application/connect+json",
    "connect-protocol-version": "1",
    "content-length": String(frame.length),
  };
  if (spec.token) headers["x-access-token"] = spec.token;
  if (spec.user) headers.authorization = `Basic ${Buffer.from(`${spec.user}:`).toString("base64")}`;
  if (spec.timeoutMs) headers["connect-timeout-ms"] = String(spec.timeoutMs);
  return { frame, headers };
}

/** Splits a Connect server stream into its enveloped JSON messages. */
class FrameReader {
  private buf = Buffer.alloc(0);
  push(chunk: Buffer, onMessage: (flags: number, msg: StartEvent) => void): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    while (this.buf.length >= 5) {
      const len = this.buf.readUInt32BE(1);
      if (this.buf.length < 5 + len) return;
      const flags = this.buf[0] ?? 0;
      const body = this.buf.subarray(5, 5 + len).toString("utf8");
      this.buf = this.buf.subarray(5 + len);
      let msg: StartEvent = {};
      try {
        msg = JSON.parse(body) as StartEvent;
      } catch {
        // A frame we cannot read carries nothing we need.
      }
      onMessage(flags, msg);
    }
  }
}

/**
 * Runs a process through envd's process service, streaming its output, and resolves with
 * its exit code once it ends. With `detach`, resolves as soon as the process has started
 * and closes the stream (the process keeps running inside the sandbox).
 */
export function envdProcess(
  ip: string,
  spec: ProcessSpec,
  opts: { onOutput?: (stream: "stdout" | "stderr", text: string) => void; detach?: boolean } = {},
): Promise<ProcessEnd> {
  return new Promise((resolve, reject) => {
    const { frame, headers } = startRequest(spec);
    let settled = false;
    const done = (fn: () => void) => {
      if (settled) return;
      settled = true;
      fn();
    };
    const req = request(
      { host: ip, port: ENVD_PORT, method: "POST", path: "/process.Process/Start", headers, agent: false },
      (res) => {
        if (res.statusCode !== 200) {
          let body = "";
          res.on("data", (d: Buffer) => (body += d.toString("utf8")));
          res.on("end", () => done(() => reject(new Error(`envd refused the process (${res.statusCode}): ${body}`))));
          return;
        }
        const reader = new FrameReader();
        res.on("data", (chunk: Buffer) =>
          reader.push(chunk, (flags, msg) => {
            const ev = msg.event;
            if (ev?.start && opts.detach) {
              done(() => resolve({ exitCode: 0 }));
              req.destroy();
            }
            if (ev?.data && opts.onOutput) {
              if (ev.data.stdout) opts.onOutput("stdout", Buffer.from(ev.data.stdout, "base64").toString("utf8"));
              if (ev.data.stderr) opts.onOutput("stderr", Buffer.from(ev.data.stderr, "base64").toString("utf8"));
            }
            if (ev?.end) {
              const exitCode = ev.end.exitCode ?? (ev.end.exited ? 0 : -1);
              done(() => resolve({ exitCode, ...(ev.end?.error ? { error: ev.end.error } : {}) }));
            }
            if (flags & 2 && msg.error) {
              done(() => reject(new Error(`envd: ${msg.error?.message ?? msg.error?.code ?? "process failed"}`)));
            }
          }),
        );
        res.on("end", () => done(() => reject(new Error("envd closed the process stream before the process ended"))));
        res.on("error", (err) => done(() => reject(err)));
      },
    );
    req.on("error", (err) => done(() => reject(err)));
    req.end(frame);
  });
}
