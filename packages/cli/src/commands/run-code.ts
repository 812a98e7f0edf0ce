import type { ExecuteLine } from "@aenv/protocol/code-interpreter";
import type { Command } from "commander";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";

/** What --language takes, and what the service is sent (E2B's names; `js` is the SDK's too). */
const LANGUAGES: Record<string, string> = {
  python: "python",
  bash: "bash",
  javascript: "javascript",
  js: "javascript",
  ts: "typescript",
};

/** The fields of a result line that are not a representation of it. */
const RESULT_META = new Set(["type", "is_main_result"]);

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(typeof c === "string" ? Buffer.from(c) : (c as Buffer));
  return Buffer.concat(chunks).toString("utf8");
}

/** The stream's lines as they arrive; a last line without its newline is one too. */
export async function* ndjsonLines(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let i = buf.indexOf("\n");
    while (i >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) yield line;
      i = buf.indexOf("\n");
    }
  }
  buf += dec.decode();
  if (buf.trim()) yield buf;
}

const isStr = (v: unknown): v is string => typeof v === "string";

/**
 * One line of the service's stream, or undefined for one this CLI does not know. The sandbox
 * runs the user's code (the service in it could be replaced): fields are checked, not trusted.
 */
export function parseLine(raw: string): ExecuteLine | undefined {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  switch (o.type) {
    case "stdout":
    case "stderr":
      return isStr(o.text)
        ? { type: o.type, text: o.text, timestamp: isStr(o.timestamp) ? o.timestamp : "" }
        : undefined;
    case "result":
      return { ...o, type: "result", is_main_result: o.is_main_result === true };
    case "error":
      return {
        type: "error",
        name: isStr(o.name) ? o.name : "Error",
        value: isStr(o.value) ? o.value : "",
        traceback: isStr(o.traceback) ? o.traceback : "",
      };
    case "number_of_executions":
      return typeof o.execution_count === "number" ? { type: o.type, execution_count: o.execution_count } : undefined;
    case "keepalive":
    case "end_of_execution":
      return { type: o.type };
    default:
      return undefined;
  }
}

/**
 * What a terminal shows of a result: its text when it is the cell's value (or has nothing
 * else), and `[png]`, `[html, chart]`… for the representations a terminal cannot show.
 */
export function describeResult(r: Extract<ExecuteLine, { type: "result" }>): string[] {
  const rich = Object.keys(r).filter((k) => !RESULT_META.has(k) && k !== "text" && r[k] !== undefined);
  const out: string[] = [];
  if (isStr(r.text) && (r.is_main_result || rich.length === 0)) out.push(r.text);
  if (rich.length) out.push(`[${rich.join(", ")}]`);
  return out;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI escapes are control characters.
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

/** A cell's error for stderr: the traceback, and `name: value` unless it already ends so. */
export function describeError(e: Extract<ExecuteLine, { type: "error" }>, colour: boolean): string {
  const tb = (colour ? e.traceback : e.traceback.replace(ANSI, "")).trimEnd();
  const head = e.value ? `${e.name}: ${e.value}` : e.name;
  const last = tb.replace(ANSI, "").split("\n").at(-1)?.trim();
  if (!tb) return `${head}\n`;
  return last === head.trim() ? `${tb}\n` : `${tb}\n${head}\n`;
}

interface RunCodeOptions {
  language?: string;
  context?: string;
  json?: boolean;
}

export function registerRunCode(program: Command, ctx: Ctx): void {
  program
    .command("run-code")
    .description(
      "run code in a code-interpreter sandbox (port 49999), streaming its output; exits 1 when the cell fails",
    )
    .argument("<id>", "sandbox ID")
    .argument("<code>", "the code, or - to read it from stdin")
    .option(
      "--language <lang>",
      "python (default), bash, javascript (js) or ts; the sandbox's default context for it",
      (v: string) => {
        const l = LANGUAGES[v];
        if (!l) throw new CliError(`--language must be one of ${Object.keys(LANGUAGES).join(", ")}, got '${v}'`);
        return l;
      },
    )
    .option("--context <id>", "a context made with the SDK's createCodeContext (its language, folder and state)")
    .option("--json", "print the service's NDJSON lines as they come")
    .addHelpText(
      "after",
      examples(
        "aenv run-code i1a2b3c4d5e6f7 'import sys; print(sys.version)'",
        "aenv run-code i1a2b3c4d5e6f7 'ls /home/user' --language bash",
        "aenv run-code i1a2b3c4d5e6f7 - < analysis.py",
        "aenv run-code i1a2b3c4d5e6f7 'df.describe()' --json | jq -c 'select(.type == \"result\")'",
      ),
    )
    .action(async (id: string, codeArg: string, o: RunCodeOptions) => {
      if (o.language && o.context) throw new CliError("give --language or --context, not both");
      const code = codeArg === "-" ? await readStdin() : codeArg;
      const api = ctx.api();
      // As the SDK's connect: a paused sandbox is resumed; the answer has its tokens.
      const sbx = await api.resume(id);
      // Ctrl-C ends the request, and the service interrupts the cell.
      const abort = new AbortController();
      const onSigint = () => abort.abort();
      process.once("SIGINT", onSigint);
      try {
        const body = await api.execute(
          sbx,
          { code, ...(o.language ? { language: o.language } : {}), ...(o.context ? { context_id: o.context } : {}) },
          abort.signal,
        );
        process.exitCode = await render(ndjsonLines(body), o.json === true);
      } catch (err) {
        if (!abort.signal.aborted) throw err;
        process.exitCode = 130;
      } finally {
        process.off("SIGINT", onSigint);
      }
    });
}

/** Writes the cell's lines as they arrive; resolves with the exit code (1 when it failed). */
async function render(lines: AsyncIterable<string>, json: boolean): Promise<number> {
  let failed = false;
  let ended = false;
  for await (const raw of lines) {
    const line = parseLine(raw);
    if (json) process.stdout.write(`${raw}\n`);
    if (!line) continue;
    if (line.type === "error") failed = true;
    if (line.type === "end_of_execution") ended = true;
    if (json) continue;
    if (line.type === "stdout") process.stdout.write(line.text);
    else if (line.type === "stderr") process.stderr.write(line.text);
    else if (line.type === "result") for (const s of describeResult(line)) process.stdout.write(`${s}\n`);
    else if (line.type === "error") process.stderr.write(describeError(line, process.stderr.isTTY === true));
  }
  if (!ended) throw new CliError("the code interpreter closed the stream before the cell ended");
  return failed ? 1 : 0;
}
