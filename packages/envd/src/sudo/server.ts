/**
 * envd's side of `sudo`/`su` (see init/aenv-sudo.c): a Unix socket at /run/aenv/sudo.sock
 * that any process in the sandbox may use, which runs the requested command as root (or the
 * requested user) and relays its stdio and exit status. Reachable only from inside this
 * sandbox: the sandbox, not the account, is the security boundary here.
 */
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { constants } from "node:os";
import { log } from "../log.js";
import type { User, UserDb } from "../users.js";
import { parseSu, parseSudo, type SudoRequest, UsageError } from "./options.js";

export const SUDO_SOCKET = "/run/aenv/sudo.sock";
const SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** What sudo's env_reset keeps from the caller (Debian's env_keep defaults, roughly). */
const KEEP = /^(TERM|COLORTERM|DISPLAY|LANG|LANGUAGE|LC_[A-Z_]+|TZ|COLUMNS|LINES|XAUTHORITY)$/;
/** Largest request frame (arguments + environment). */
const MAX_REQUEST = 4 * 1024 * 1024;

interface Request {
  tool: "sudo" | "su";
  cwd: string;
  args: string[];
  env: Record<string, string>;
}

function frame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(5);
  h.write(type, 0, "latin1");
  h.writeUInt32BE(payload.length, 1);
  return Buffer.concat([h, payload]);
}

export function decodeRequest(b: Buffer): Request {
  const parts = b.toString("utf8").split("\0");
  if (parts.at(-1) === "") parts.pop();
  const [tool, cwd, count, ...rest] = parts;
  const n = Number(count);
  if ((tool !== "sudo" && tool !== "su") || cwd === undefined || !Number.isInteger(n) || n < 0 || n > rest.length) {
    throw new UsageError("malformed request");
  }
  const env: Record<string, string> = {};
  for (const kv of rest.slice(n)) {
    const eq = kv.indexOf("=");
    if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  return { tool, cwd, args: rest.slice(0, n), env };
}

/** The argv and environment a parsed request runs with. */
export function commandFor(
  r: Extract<SudoRequest, { kind: "run" }>,
  target: User,
  caller: { env: Record<string, string>; name: string; uid: string; gid: string },
): { file: string; args: string[]; env: Record<string, string> } {
  const base: Record<string, string> = {};
  if (r.preserveEnv === true) Object.assign(base, caller.env);
  else {
    for (const [k, v] of Object.entries(caller.env)) if (KEEP.test(k)) base[k] = v;
    if (Array.isArray(r.preserveEnv))
      for (const k of r.preserveEnv) if (caller.env[k] !== undefined) base[k] = caller.env[k];
  }
  const keepHome = r.preserveEnv === true && !r.login;
  const env: Record<string, string> = {
    ...base,
    PATH: SECURE_PATH,
    HOME: keepHome && base.HOME ? base.HOME : target.home,
    USER: target.name,
    LOGNAME: target.name,
    SHELL: r.shellPath ?? target.shell,
    SUDO_USER: caller.name,
    SUDO_UID: caller.uid,
    SUDO_GID: caller.gid,
    SUDO_COMMAND: r.argv.join(" "),
  };
  const shell = r.shellPath ?? (target.shell || "/bin/sh");
  if (!r.shell) return { file: r.argv[0] as string, args: r.argv.slice(1), env };
  const loginFlag = r.login ? ["-l"] : [];
  if (!r.argv.length) return { file: shell, args: [...loginFlag], env };
  return { file: shell, args: [...loginFlag, "-c", r.argv.join(" ")], env };
}

export class SudoServer {
  private server: Server | undefined;

  constructor(private readonly users: UserDb) {}

  start(): void {
    try {
      mkdirSync("/run/aenv", { recursive: true, mode: 0o755 });
      rmSync(SUDO_SOCKET, { force: true });
      const server = createServer((sock) => this.serve(sock));
      server.on("error", (err) => log("warn", "sudo service stopped", { err }));
      server.listen(SUDO_SOCKET, () => {
        // Every account in the sandbox may ask: the passwordless sudo E2B's templates give.
        chmodSync(SUDO_SOCKET, 0o666);
      });
      this.server = server;
    } catch (err) {
      log("warn", "sudo service not started", { err });
    }
  }

  close(): void {
    this.server?.close();
  }

  private serve(sock: Socket): void {
    let buf = Buffer.alloc(0);
    let child: ReturnType<typeof spawn> | undefined;
    let starting = false;
    let done = false;
    // Stdin and signals that arrive while the command is still being started wait for it.
    const early: Array<[string, Buffer]> = [];
    const send = (type: string, payload?: Buffer) => {
      if (!sock.destroyed) sock.write(frame(type, payload));
    };
    const fail = (message: string) => {
      done = true;
      send("M", Buffer.from(message));
      sock.end();
    };
    const apply = (type: string, payload: Buffer) => {
      if (!child) return;
      if (type === "I") child.stdin?.write(payload);
      else if (type === "E") child.stdin?.end();
      else if (type === "S" && payload.length === 1) {
        const name = Object.entries(constants.signals).find(([, n]) => n === payload[0])?.[0];
        if (name) child.kill(name as NodeJS.Signals);
      }
    };
    sock.on("error", () => child?.kill("SIGHUP"));
    sock.on("close", () => {
      if (!done) child?.kill("SIGHUP");
    });
    sock.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      while (buf.length >= 5) {
        const type = String.fromCharCode(buf[0] as number);
        const len = buf.readUInt32BE(1);
        if (len > MAX_REQUEST) return fail("request too large");
        if (buf.length < 5 + len) return;
        const payload = Buffer.from(buf.subarray(5, 5 + len));
        buf = buf.subarray(5 + len);
        if (type === "R") {
          if (starting || done) continue;
          starting = true;
          this.run(payload, send, fail).then(
            (c) => {
              child = c;
              for (const [t, p] of early.splice(0)) apply(t, p);
            },
            (err: Error) => fail(err.message),
          );
        } else if (child) apply(type, payload);
        else early.push([type, payload]);
      }
    });
  }

  private async run(
    payload: Buffer,
    send: (type: string, payload?: Buffer) => void,
    fail: (message: string) => void,
  ): Promise<ReturnType<typeof spawn> | undefined> {
    const req = decodeRequest(payload);
    const callerName = req.env.USER ?? req.env.LOGNAME ?? "user";
    let parsed: SudoRequest;
    try {
      parsed = req.tool === "su" ? parseSu(req.args) : parseSudo(req.args, callerName);
    } catch (err) {
      if (err instanceof UsageError) {
        send("X", Buffer.from(`${req.tool}: ${err.message}\n`));
        send("C", int32(1));
        return undefined;
      }
      throw err;
    }
    if (parsed.kind === "print") {
      if (parsed.text) send("O", Buffer.from(parsed.text));
      send("C", int32(parsed.code));
      return undefined;
    }
    const target = await this.users.lookup(parsed.user);
    if (!target) {
      fail(
        parsed.kind === "run" && req.tool === "su"
          ? `user ${parsed.user} does not exist`
          : `unknown user ${parsed.user}`,
      );
      return undefined;
    }
    const caller = await this.users.lookup(callerName);
    const cmd = commandFor(parsed, target, {
      env: req.env,
      name: callerName,
      uid: String(caller?.uid ?? ""),
      gid: String(caller?.gid ?? ""),
    });
    const cwd = parsed.login ? target.home : req.cwd;
    const child = spawn(cmd.file, cmd.args, {
      cwd,
      env: cmd.env,
      stdio: ["pipe", "pipe", "pipe"],
      ...(target.uid !== 0 || target.gid !== 0 ? { uid: target.uid, gid: target.gid } : {}),
    });
    child.stdout?.on("data", (d: Buffer) => send("O", d));
    child.stderr?.on("data", (d: Buffer) => send("X", d));
    child.stdin?.on("error", () => {});
    child.on("error", (err) => {
      const code = (err as NodeJS.ErrnoException).code === "ENOENT" ? 127 : 1;
      send("X", Buffer.from(`${req.tool}: ${cmd.file}: ${code === 127 ? "command not found" : err.message}\n`));
      send("C", int32(code));
    });
    child.on("close", (code, signal) => {
      const n = code ?? 128 + (signal ? (constants.signals[signal] ?? 1) : 1);
      send("C", int32(n));
    });
    return child;
  }
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}
