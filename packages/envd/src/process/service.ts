/** process.Process Connect service (§5.6). */
import { promises as fsp } from "node:fs";
import { type Process, processPb } from "@aenv/protocol";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Env } from "../env.js";
import { resolvePath } from "../paths.js";
import { keepaliveMs, PushQueue } from "../rpc/stream.js";
import { rpcUser } from "../rpc/user.js";
import { buildProcessEnv } from "./env.js";
import type { ProcEvent, ProcessHandle } from "./handle.js";

type EventInit = { event: MessageInitShape<typeof processPb.ProcessEventSchema> };

/** Extra time a deadline-aborted Start stream waits for the end event of the process it just killed. */
const DEADLINE_GRACE_MS = 1000;

function toMessage(ev: ProcEvent): EventInit {
  if (ev.kind === "data") {
    return { event: { event: { case: "data", value: { output: { case: ev.stream, value: ev.data } } } } };
  }
  const { exitCode, exited, status, error } = ev.end;
  return { event: { event: { case: "end", value: { exitCode, exited, status, error } } } };
}

const startMessage = (pid: number): EventInit => ({ event: { event: { case: "start", value: { pid } } } });
const keepaliveMessage = (): EventInit => ({ event: { event: { case: "keepalive", value: {} } } });

async function isDirectory(p: string): Promise<boolean> {
  try {
    return (await fsp.stat(p)).isDirectory();
  } catch {
    return false;
  }
}

/** Stream a process's events to one client, starting with start{pid}. */
async function* streamProcess(
  handle: ProcessHandle,
  sub: Subscription,
  ctx: HandlerContext,
): AsyncGenerator<EventInit> {
  try {
    yield startMessage(handle.pid);
    yield* sub.queue.drain({
      signal: ctx.signal,
      intervalMs: keepaliveMs(ctx.requestHeader),
      keepalive: keepaliveMessage,
      graceOnDeadlineMs: DEADLINE_GRACE_MS,
    });
  } finally {
    sub.close();
  }
}

/** Queue length at which a subscriber counts as congested (pauses reading output), and when it is released. */
const HIGH_WATER = 256;
const LOW_WATER = 32;

/** One client's view of a process: a queue fed by the process, with flow control. */
class Subscription {
  readonly queue = new PushQueue<EventInit>();
  handle: ProcessHandle | undefined;
  private congested = false;

  readonly listener = (ev: ProcEvent): void => {
    this.queue.push(toMessage(ev));
    if (ev.kind === "end") this.queue.close();
    else if (!this.congested && this.queue.length >= HIGH_WATER && this.handle) {
      this.congested = true;
      this.handle.throttle(1);
    }
  };

  constructor() {
    this.queue.onShift = (remaining) => {
      if (this.congested && remaining <= LOW_WATER) this.release();
    };
  }

  private release(): void {
    if (!this.congested) return;
    this.congested = false;
    this.handle?.throttle(-1);
  }

  close(): void {
    this.handle?.removeListener(this.listener);
    this.release();
  }
}

function dataOf(input: processPb.ProcessInput | undefined): { pty: boolean; data: Uint8Array } | undefined {
  const i = input?.input;
  if (i?.case === "stdin") return { pty: false, data: i.value };
  if (i?.case === "pty") return { pty: true, data: i.value };
  return undefined;
}

async function sendInput(h: ProcessHandle, input: processPb.ProcessInput | undefined): Promise<void> {
  const d = dataOf(input);
  if (!d) return;
  if (d.pty && h.isPty) h.writePty(d.data);
  else await h.writeStdin(d.data);
}

export function processService(env: Env): ServiceImpl<typeof Process> {
  return {
    async *start(req, ctx) {
      const user = await rpcUser(env, ctx);
      const cfg = req.process;
      if (!cfg?.cmd) throw new ConnectError("process.cmd is required", Code.InvalidArgument);
      let cwd: string;
      if (cfg.cwd !== undefined && cfg.cwd !== "") {
        cwd = resolvePath(cfg.cwd, user, env.state.defaultWorkdir);
        if (!(await isDirectory(cwd))) throw new ConnectError(`cwd '${cwd}' does not exist`, Code.InvalidArgument);
      } else {
        const candidates = [env.state.defaultWorkdir, user.home, "/"].filter((c): c is string => !!c);
        cwd = "/";
        for (const c of candidates) {
          if (await isDirectory(c)) {
            cwd = c;
            break;
          }
        }
      }
      const sub = new Subscription();
      const size = req.pty?.size;
      const handle = await env.processes.start(
        {
          config: { cmd: cfg.cmd, args: [...cfg.args], envs: { ...cfg.envs }, cwd },
          cwd,
          env: buildProcessEnv(user, env.state.envVars, cfg.envs),
          uid: user.uid,
          gid: user.gid,
          tag: req.tag,
          stdin: req.stdin ?? true,
          pty: req.pty ? { cols: size?.cols ?? 80, rows: size?.rows ?? 24 } : undefined,
        },
        sub.listener,
      );
      sub.handle = handle;
      // Connect-Timeout-Ms on Start is the lifetime of the process itself.
      const lifetime = ctx.timeoutMs();
      if (lifetime !== undefined) handle.setLifetime(Math.max(lifetime, 1));
      yield* streamProcess(handle, sub, ctx);
    },

    async *connect(req, ctx) {
      const handle = env.processes.getAny(req.process?.selector);
      const sub = new Subscription();
      sub.handle = handle;
      handle.subscribe(sub.listener);
      if (handle.end) {
        sub.queue.push(toMessage({ kind: "end", end: handle.end }));
        sub.queue.close();
      }
      yield* streamProcess(handle, sub, ctx);
    },

    list() {
      return {
        processes: env.processes.list().map((h) => ({
          pid: h.pid,
          tag: h.tag,
          config: { cmd: h.config.cmd, args: h.config.args, envs: h.config.envs, cwd: h.config.cwd },
        })),
      };
    },

    async sendInput(req) {
      const h = env.processes.getLive(req.process?.selector);
      await sendInput(h, req.input);
      return {};
    },

    async streamInput(requests) {
      let h: ProcessHandle | undefined;
      for await (const r of requests) {
        const ev = r.event;
        if (ev.case === "start") h = env.processes.getLive(ev.value.process?.selector);
        else if (ev.case === "data") {
          if (!h) throw new ConnectError("stream input must start with a start event", Code.FailedPrecondition);
          await sendInput(h, ev.value.input);
        }
      }
      return {};
    },

    sendSignal(req) {
      const h = env.processes.getLive(req.process?.selector);
      switch (req.signal) {
        case processPb.Signal.SIGKILL:
          h.signal("SIGKILL");
          break;
        case processPb.Signal.SIGTERM:
          h.signal("SIGTERM");
          break;
        default:
          throw new ConnectError(`unsupported signal: ${req.signal}`, Code.InvalidArgument);
      }
      return {};
    },

    closeStdin(req) {
      env.processes.getLive(req.process?.selector).closeStdin();
      return {};
    },

    update(req) {
      const h = env.processes.getLive(req.process?.selector);
      const size = req.pty?.size;
      if (size) h.resize(size.cols, size.rows);
      return {};
    },
  };
}
