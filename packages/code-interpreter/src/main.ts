/**
 * The code-interpreter service: @e2b/code-interpreter's API on port 49999, over a local
 * jupyter-server (Python) and our own bash and JavaScript interpreters. Started by the
 * template's start command, so every sandbox restored from the warm image has it running
 * with a Python kernel ready.
 */
import { homedir } from "node:os";
import { CODE_INTERPRETER_PORT } from "@aenv/protocol/code-interpreter";
import { Contexts } from "./contexts.js";
import { apiServer } from "./http.js";
import { JupyterServer } from "./jupyter.js";

const log = (m: string) => process.stderr.write(`${new Date().toISOString()} code-interpreter: ${m}\n`);
const port = Number(process.env.AENV_CODE_INTERPRETER_PORT ?? CODE_INTERPRETER_PORT);
const home = process.env.HOME ?? homedir();
const STABLE_START_MS = 11_000;

async function main(): Promise<void> {
  const jupyter = new JupyterServer(Number(process.env.AENV_JUPYTER_PORT ?? 8888), `${home}/.local/share/aenv-jupyter`);
  // Every Python context lived in it: the start command's loop starts the service afresh.
  jupyter.onExit = () => process.exit(1);
  const contexts = new Contexts(jupyter, home);
  let ready = false;
  // Listening at once: /health says 503 until the default kernel is up.
  apiServer(contexts, () => ready, log).listen(port, "0.0.0.0");
  await jupyter.start(log);
  const started = Date.now();
  await contexts.defaultFor("python");
  // jupyter-server's restarter counts a kernel as started once it has been up for 10 s; a warm
  // image captured before that restarted the kernel in every sandbox restored from it.
  const settle = STABLE_START_MS - (Date.now() - started);
  if (settle > 0) await new Promise((r) => setTimeout(r, settle));
  ready = true;
  log(`ready on :${port}`);
}

main().catch((err: unknown) => {
  log(`failed to start: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
});
