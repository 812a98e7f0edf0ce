import { ENVD_PORT, Process } from "@aenv/protocol";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

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

/**
 * A client of envd's process service over a sandbox's slot address: the same generated
 * service definition envd serves, JSON over HTTP/1.1 as the SDK speaks it.
 */
function processClient(ip: string) {
  return createClient(
    Process,
    createConnectTransport({ baseUrl: `http://${ip}:${ENVD_PORT}`, httpVersion: "1.1", useBinaryFormat: false }),
  );
}

/**
 * Runs a process through envd's process service, streaming its output, and resolves with
 * its exit code once it ends. With `detach`, resolves as soon as the process has started
 * and closes the stream (the process keeps running inside the sandbox).
 */
export async function envdProcess(
  ip: string,
  spec: ProcessSpec,
  opts: { onOutput?: (stream: "stdout" | "stderr", text: string) => void; detach?: boolean } = {},
): Promise<ProcessEnd> {
  const headers: Record<string, string> = {};
  if (spec.token) headers["x-access-token"] = spec.token;
  if (spec.user) headers.authorization = `Basic ${Buffer.from(`${spec.user}:`).toString("base64")}`;
  const abort = new AbortController();
  const stream = processClient(ip).start(
    { process: { cmd: spec.cmd, args: spec.args, envs: spec.envs ?? {}, ...(spec.cwd ? { cwd: spec.cwd } : {}) } },
    { headers, signal: abort.signal, ...(spec.timeoutMs ? { timeoutMs: spec.timeoutMs } : {}) },
  );
  const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");
  try {
    for await (const res of stream) {
      const ev = res.event?.event;
      if (ev?.case === "start" && opts.detach) {
        abort.abort();
        return { exitCode: 0 };
      }
      if (ev?.case === "data" && opts.onOutput) {
        const out = ev.value.output;
        if (out.case === "stdout") opts.onOutput("stdout", text(out.value));
        if (out.case === "stderr") opts.onOutput("stderr", text(out.value));
      }
      if (ev?.case === "end") {
        const end = ev.value;
        return { exitCode: end.exitCode, ...(end.error ? { error: end.error } : {}) };
      }
    }
  } catch (err) {
    const ce = ConnectError.from(err);
    if (ce.code === Code.Canceled && abort.signal.aborted) return { exitCode: 0 };
    throw new Error(`envd: ${ce.rawMessage || Code[ce.code]}`, { cause: err });
  }
  throw new Error("envd closed the process stream before the process ended");
}

/**
 * One login shell through envd, as every `commands.run` starts one; best effort. It leaves
 * bash and its libraries in the sentry's page cache and envd's process path warm, so the
 * next command costs what later ones do (a template's warm image, a pooled sandbox).
 */
export async function runLoginShellOnce(ip: string): Promise<void> {
  await envdProcess(ip, { cmd: "/bin/bash", args: ["-l", "-c", "true"], timeoutMs: 30_000 }).catch(() => undefined);
}
