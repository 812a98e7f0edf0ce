import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { errorBodyOf } from "@aenv/edge/http-errors";
import { ENVD_HEAP_REDUCE_PATH, ENVD_PORT, ENVD_QUIESCE_PATH, Process } from "@aenv/protocol";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { LatencyModel } from "./latency.js";

/** What a simulated command prints and exits with. */
export interface SimCommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/**
 * The shell line a simulated sandbox "runs": the SDK's commands.run(cmd) starts
 * `/bin/bash -l -c cmd`. Only `true`, `false`, `exit N` and `echo WORDS` are simulated (what a
 * scale test and the orchestrator's own warm-up commands need); anything else exits 127, as a
 * shell does for a command it cannot find.
 */
export function simulateCommand(cmd: string, args: readonly string[]): SimCommandResult {
  const ci = args.indexOf("-c");
  const line = (ci >= 0 ? (args[ci + 1] ?? "") : [cmd, ...args].join(" ")).trim();
  if (line === "" || line === "true" || line === ":") return { stdout: "", stderr: "", exitCode: 0 };
  if (line === "false") return { stdout: "", stderr: "", exitCode: 1 };
  const exit = /^exit (\d{1,3})$/.exec(line);
  if (exit) return { stdout: "", stderr: "", exitCode: Number(exit[1]) & 255 };
  const echo = /^echo(?: (.*))?$/.exec(line);
  if (echo) return { stdout: `${(echo[1] ?? "").replace(/\s+/g, " ")}\n`, stderr: "", exitCode: 0 };
  return { stdout: "", stderr: `aenv sim: '${line}' is not simulated\n`, exitCode: 127 };
}

/**
 * An `/init` whose environment names this variable is refused (500), as a real envd's failing
 * /init would be: a start that fails after its slot, runtime and record are taken, for tests
 * of what a failed start leaves behind.
 */
export const SIM_FAIL_INIT_ENV = "AENV_SIM_FAIL_INIT";

/**
 * envd of one simulated sandbox: an HTTP server on the sandbox's slot address at envd's port,
 * so the node's envd client and proxy reach it exactly as they reach a real envd. It answers
 * what the node and the e2b SDK's create/connect/commands.run need: `/health`, `/init`,
 * `/quiesce`, `/heap/reduce`, `/envs` and the process service's `Start`. It checks no token:
 * the node's proxy authenticates clients before it forwards, and only loopback reaches it.
 */
export class EnvdStandIn {
  private server: Server | undefined;
  private envVars: Record<string, string> = {};
  private nextPid = 100;

  constructor(
    readonly address: string,
    private readonly latency: LatencyModel,
  ) {}

  async listen(): Promise<void> {
    const connect = connectNodeAdapter({
      routes: (router) =>
        router.service(Process, {
          start: (req) => this.start(req.process?.cmd ?? "", req.process?.args ?? []),
        }),
      // An HTTP/1.1 server (below): its requests are IncomingMessages.
      fallback: (req, res) => void this.plain(req as IncomingMessage, res as ServerResponse),
    });
    const server = createServer(connect);
    server.keepAliveTimeout = 5000;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(ENVD_PORT, this.address, () => {
        server.off("error", reject);
        resolve();
      });
    });
    this.server = server;
  }

  /** Stops answering at once: open connections are cut, as when a sandbox stops. */
  async close(): Promise<void> {
    const s = this.server;
    if (!s) return;
    this.server = undefined;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async *start(cmd: string, args: readonly string[]) {
    const pid = this.nextPid++;
    yield { event: { event: { case: "start" as const, value: { pid } } } };
    await this.latency.wait("command");
    const r = simulateCommand(cmd, args);
    if (r.stdout)
      yield {
        event: {
          event: {
            case: "data" as const,
            value: { output: { case: "stdout" as const, value: Buffer.from(r.stdout) } },
          },
        },
      };
    if (r.stderr)
      yield {
        event: {
          event: {
            case: "data" as const,
            value: { output: { case: "stderr" as const, value: Buffer.from(r.stderr) } },
          },
        },
      };
    yield {
      event: {
        event: {
          case: "end" as const,
          value: { exitCode: r.exitCode, exited: true, status: `exit status ${r.exitCode}` },
        },
      },
    };
  }

  private async plain(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === "GET" && path === "/health") return void res.writeHead(204).end();
    if (req.method === "POST" && path === "/init") {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}") as { envVars?: unknown };
        if (body.envVars && typeof body.envVars === "object" && SIM_FAIL_INIT_ENV in body.envVars) {
          return sendError(res, 500, `aenv sim: /init refused (${SIM_FAIL_INIT_ENV} is set)`);
        }
        if (body.envVars && typeof body.envVars === "object") {
          this.envVars = { ...this.envVars, ...(body.envVars as Record<string, string>) };
        }
      } catch {
        return sendError(res, 400, "bad /init body");
      }
      return void res.writeHead(204).end();
    }
    if (req.method === "POST" && (path === ENVD_QUIESCE_PATH || path === ENVD_HEAP_REDUCE_PATH)) {
      return void res.writeHead(204).end();
    }
    if (req.method === "GET" && path === "/envs") {
      return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(this.envVars));
    }
    sendError(res, 501, `aenv sim: envd's ${req.method} ${path} is not simulated`);
  }
}

/** The {code, message} body envd answers an error with (its internal/respond), as the rest of the server writes it. */
function sendError(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(errorBodyOf(status, message)));
}
