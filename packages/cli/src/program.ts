import { Command, CommanderError, Option } from "commander";
import { registerAuth } from "./commands/auth.js";
import { registerBuild } from "./commands/build.js";
import { registerCompletion } from "./commands/completion.js";
import { registerFiles } from "./commands/files.js";
import { registerKeys } from "./commands/keys.js";
import { registerRunCode } from "./commands/run-code.js";
import { registerSandboxes } from "./commands/sandboxes.js";
import { registerShell } from "./commands/shell.js";
import { registerSnapshots } from "./commands/snapshots.js";
import { registerTemplates } from "./commands/templates.js";
import { makeCtx } from "./context.js";
import { CliError, errorLine } from "./errors.js";

export const VERSION = "0.1.0";

export interface ProgramIO {
  writeOut?: (s: string) => void;
  writeErr?: (s: string) => void;
}

/** The whole command tree; commander errors are thrown (exitOverride), not process.exit()ed. */
export function buildProgram(io: ProgramIO = {}): Command {
  const writeErr = io.writeErr ?? ((s: string) => void process.stderr.write(s));
  const program = new Command("aenv")
    .description("command-line client for aenv, the self-hosted E2B-compatible sandbox server")
    .version(VERSION, "-v, --version")
    .addOption(
      new Option("-o, --output <format>", "output format (default: table on a terminal, json otherwise)").choices([
        "table",
        "json",
      ]),
    )
    .showSuggestionAfterError(true)
    .addHelpText(
      "after",
      "\nConfiguration: 'aenv auth', or AENV_API_URL and AENV_API_KEY (default URL http://127.0.0.1:8000).\n" +
        "\nExamples:\n  $ aenv start --detach\n  $ aenv exec <id> -- uname -a\n  $ aenv connect <id>\n",
    );
  const ctx = makeCtx(program);
  registerAuth(program, ctx);
  registerSandboxes(program, ctx);
  registerShell(program, ctx);
  registerFiles(program, ctx);
  registerRunCode(program, ctx);
  registerSnapshots(program, ctx);
  registerTemplates(program, ctx);
  registerKeys(program, ctx);
  registerBuild(program, ctx);
  registerCompletion(program, ctx);
  const configure = (c: Command) => {
    c.exitOverride();
    c.configureOutput({
      writeOut: io.writeOut ?? ((s) => void process.stdout.write(s)),
      writeErr,
      outputError: (s, write) =>
        write(
          `aenv: ${
            s
              .replace(/^error: /, "")
              .trim()
              .split("\n")[0]
          }\n`,
        ),
    });
    for (const s of c.commands) configure(s);
  };
  configure(program);
  return program;
}

/** Runs the CLI; returns the exit code. Errors become one line `aenv: <message>` on stderr. */
export async function run(argv: string[], io: ProgramIO = {}): Promise<number> {
  const writeErr = io.writeErr ?? ((s: string) => void process.stderr.write(s));
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: "user" });
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (e) {
    if (e instanceof CommanderError) {
      // Commander already printed the message (help, version, or a usage error).
      if (e.code === "commander.helpDisplayed" || e.code === "commander.version" || e.code === "commander.help")
        return 0;
      // Errors thrown by argument parsers arrive wrapped; they were printed as well.
      return e.exitCode === 0 ? 0 : e.exitCode || 1;
    }
    writeErr(`aenv: ${errorLine(e)}\n`);
    return e instanceof CliError ? e.exitCode : 1;
  }
}
