import type { Command } from "commander";
import { CommandExitError } from "e2b";
import type { Api } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { commandLine } from "../parse.js";

const KEEPALIVE_MS = 30_000;
const KEEPALIVE_S = 120;

/** Exit code of a finished SDK command, whether it threw CommandExitError or not. */
async function exitCodeOf(wait: Promise<{ exitCode: number }>): Promise<number> {
  try {
    return (await wait).exitCode;
  } catch (e) {
    if (e instanceof CommandExitError) return e.exitCode;
    throw e;
  }
}

/** Interactive PTY shell (bash -i -l); resolves with the shell's exit code. */
export async function attachShell(api: Api, id: string): Promise<number> {
  const sbx = await api.connect(id);
  const stdin = process.stdin;
  const stdout = process.stdout;
  const size = () => ({ cols: stdout.columns || 80, rows: stdout.rows || 24 });
  const handle = await sbx.pty.create({
    ...size(),
    timeoutMs: 0,
    envs: { TERM: process.env.TERM || "xterm-256color" },
    onData: (d) => {
      stdout.write(d);
    },
  });
  const keepalive = setInterval(() => void api.refresh(id, KEEPALIVE_S).catch(() => undefined), KEEPALIVE_MS);
  // Keystrokes go out in order, one request at a time.
  let chain: Promise<void> = Promise.resolve();
  const onInput = (d: Buffer) => {
    chain = chain.then(() => sbx.pty.sendInput(handle.pid, new Uint8Array(d)).catch(() => undefined));
  };
  const onResize = () => void sbx.pty.resize(handle.pid, size()).catch(() => undefined);
  const wasRaw = stdin.isTTY ? stdin.isRaw : false;
  if (stdin.isTTY) stdin.setRawMode(true);
  stdin.on("data", onInput);
  stdin.resume();
  process.on("SIGWINCH", onResize);
  try {
    return await exitCodeOf(handle.wait());
  } finally {
    clearInterval(keepalive);
    process.off("SIGWINCH", onResize);
    stdin.off("data", onInput);
    if (stdin.isTTY) stdin.setRawMode(wasRaw);
    stdin.pause();
  }
}

export function registerShell(program: Command, ctx: Ctx): void {
  program
    .command("connect")
    .alias("cn")
    .description("open an interactive shell (PTY) in a sandbox; exits with the shell's exit code")
    .argument("<id>", "sandbox ID")
    .addHelpText("after", examples("aenv connect i1a2b3c4d5e6f7", "aenv cn i1a2b3c4d5e6f7"))
    .action(async (id: string) => {
      process.exitCode = await attachShell(ctx.api(), id);
    });

  program
    .command("exec")
    .description("run a command in a sandbox, streaming stdout and stderr apart; exits with its exit code")
    .argument("<id>", "sandbox ID")
    .argument(
      "<cmd...>",
      "after --: several words are an argv, run exactly as given (like docker exec); one word is a shell command line (bash -l -c)",
    )
    .option("--cwd <dir>", "working directory")
    .option("--user <user>", "user to run as")
    .addHelpText(
      "after",
      examples(
        "aenv exec i1a2b3c4d5e6f7 -- ls -la /home/user                  # argv: three words",
        "aenv exec i1a2b3c4d5e6f7 -- sh -c 'echo \"a  b\"; exit 3'      # argv: quoting kept",
        "aenv exec i1a2b3c4d5e6f7 'ls /tmp | wc -l'                      # one word: a shell line",
      ),
    )
    .action(async (id: string, cmd: string[], o: { cwd?: string; user?: string }) => {
      const line = commandLine(cmd);
      const sbx = await ctx.api().connect(id);
      const handle = await sbx.commands.run(line, {
        background: true,
        timeoutMs: 0,
        cwd: o.cwd,
        user: o.user,
        onStdout: (d) => void process.stdout.write(d),
        onStderr: (d) => void process.stderr.write(d),
      });
      process.exitCode = await exitCodeOf(handle.wait());
    });
}
