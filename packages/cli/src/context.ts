import type { Command } from "commander";
import { Api } from "./api.js";
import { resolveConfig } from "./config.js";
import { outputMode, type Printer, printer } from "./output.js";

/** What every command action needs, resolved lazily from the global options and the environment. */
export interface Ctx {
  api(): Api;
  out(): Printer;
}

export function makeCtx(program: Command): Ctx {
  let api: Api | undefined;
  return {
    api: () => (api ??= new Api(resolveConfig())),
    out: () => printer(outputMode(program.opts<{ output?: string }>().output, process.stdout.isTTY)),
  };
}

/** Help text footer with examples. */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  $ ${l}`).join("\n")}\n`;
}
