/**
 * The JavaScript context's interpreter, a child process of the service (node with an IPC
 * channel). Cells run as scripts in this process's own global context, so declarations
 * (`var`, `let`, `const`, functions) carry over from cell to cell; a cell whose value is a
 * promise is awaited. console output goes back over IPC, in order with the cell's end.
 */
import { Console } from "node:console";
import { createRequire } from "node:module";
import { Writable } from "node:stream";
import { inspect } from "node:util";
import { runInThisContext } from "node:vm";

type Out =
  | { kind: "stdout" | "stderr"; id: number; text: string }
  | { kind: "result"; id: number; text: string }
  | { kind: "error"; id: number; name: string; value: string; traceback: string }
  | { kind: "done"; id: number };

let current = 0;
function send(m: Out): void {
  process.send?.(m);
}
function stream(kind: "stdout" | "stderr"): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      send({ kind, id: current, text: chunk.toString("utf8") });
      cb();
    },
  });
}
const g = globalThis as Record<string, unknown>;
g.console = new Console({ stdout: stream("stdout"), stderr: stream("stderr") });
g.require = createRequire(`${process.cwd()}/`);

process.on("message", async (m: { id: number; code?: string; env?: Record<string, string | null> }) => {
  current = m.id;
  if (m.env) {
    for (const [k, v] of Object.entries(m.env)) {
      if (v === null) delete process.env[k];
      else process.env[k] = v;
    }
  }
  if (m.code !== undefined) {
    try {
      let value: unknown = runInThisContext(m.code, { filename: `cell-${m.id}.js` });
      if (value instanceof Promise) value = await value;
      if (value !== undefined) send({ kind: "result", id: m.id, text: inspect(value) });
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      send({ kind: "error", id: m.id, name: e.name, value: e.message, traceback: e.stack ?? "" });
    }
  }
  send({ kind: "done", id: m.id });
});
