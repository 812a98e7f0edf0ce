import { randomUUID } from "node:crypto";
import { statSync } from "node:fs";
import { CODE_LANGUAGES, type CodeContext, type CodeLanguage } from "@aenv/protocol/code-interpreter";
import type { JupyterServer } from "./jupyter.js";
import { BashKernel } from "./kernels/bash.js";
import { JavaScriptKernel } from "./kernels/javascript.js";
import type { Kernel } from "./kernels/kernel.js";
import { PythonKernel } from "./kernels/python.js";

/** A request the client can fix (400), or a context that does not exist (404). */
export class RequestError extends Error {
  constructor(
    readonly status: 400 | 404,
    message: string,
  ) {
    super(message);
  }
}

/** Enough for any agent; a context is a process once used (a Python kernel: ~50 MB). */
export const MAX_CONTEXTS = 100;

const ALIASES: Record<string, CodeLanguage> = { python3: "python", js: "javascript", sh: "bash", shell: "bash" };

export function parseLanguage(lang: string | null | undefined): CodeLanguage {
  const l = (lang ?? "python").trim().toLowerCase();
  const known = (CODE_LANGUAGES as readonly string[]).includes(l) ? (l as CodeLanguage) : ALIASES[l];
  if (!known) throw new RequestError(400, `unsupported language '${lang}': use one of ${CODE_LANGUAGES.join(", ")}`);
  return known;
}

interface Entry {
  ctx: CodeContext;
  kernel: Kernel;
}

/**
 * The contexts of this sandbox: a default one per language (created on first use, the
 * Python one at start, listed nowhere as E2B's are not) and the ones clients create.
 */
export class Contexts {
  private readonly entries = new Map<string, Entry>();
  private readonly defaults = new Map<CodeLanguage, Promise<Entry>>();
  private sandboxEnv: Record<string, string> = {};
  private creating = 0;

  constructor(
    private readonly jupyter: JupyterServer,
    private readonly home: string,
  ) {}

  private async newKernel(language: CodeLanguage, cwd: string): Promise<Kernel> {
    let st: ReturnType<typeof statSync> | undefined;
    try {
      st = statSync(cwd);
    } catch {
      st = undefined;
    }
    if (!st?.isDirectory()) throw new RequestError(400, `cwd '${cwd}' is not a directory`);
    const k: Kernel =
      language === "python"
        ? await PythonKernel.start(this.jupyter, cwd)
        : language === "bash"
          ? new BashKernel(cwd)
          : new JavaScriptKernel(cwd);
    if (Object.keys(this.sandboxEnv).length) await k.setEnv(this.sandboxEnv);
    return k;
  }

  async create(language: CodeLanguage, cwd: string | null | undefined): Promise<CodeContext> {
    if (this.entries.size + this.creating >= MAX_CONTEXTS) {
      throw new RequestError(400, `at most ${MAX_CONTEXTS} contexts: remove one first`);
    }
    this.creating++;
    try {
      const ctx: CodeContext = { id: randomUUID(), language, cwd: cwd ?? this.home };
      this.entries.set(ctx.id, { ctx, kernel: await this.newKernel(language, ctx.cwd) });
      return ctx;
    } finally {
      this.creating--;
    }
  }

  list(): CodeContext[] {
    return [...this.entries.values()].map((e) => e.ctx);
  }

  get(id: string): Kernel {
    const e = this.entries.get(id);
    if (!e) throw new RequestError(404, `Context ${id} not found`);
    return e.kernel;
  }

  async defaultFor(language: CodeLanguage): Promise<Kernel> {
    let p = this.defaults.get(language);
    if (!p) {
      p = this.newKernel(language, this.home).then((kernel) => ({
        ctx: { id: `default-${language}`, language, cwd: this.home },
        kernel,
      }));
      this.defaults.set(language, p);
      p.catch(() => this.defaults.delete(language));
    }
    return (await p).kernel;
  }

  async remove(id: string): Promise<void> {
    const k = this.get(id);
    this.entries.delete(id);
    await k.shutdown();
  }

  restart(id: string): Promise<void> {
    return this.get(id).restart();
  }

  private async all(): Promise<Kernel[]> {
    const defaults = await Promise.all([...this.defaults.values()].map((p) => p.catch(() => undefined)));
    return [...defaults.flatMap((e) => (e ? [e.kernel] : [])), ...[...this.entries.values()].map((e) => e.kernel)];
  }

  /** The sandbox became another one: its variables into every kernel, generators reseeded. */
  async renew(env: Record<string, string>): Promise<void> {
    this.sandboxEnv = { ...this.sandboxEnv, ...env };
    const kernels = await this.all();
    await Promise.all(
      kernels.map(async (k) => {
        if (Object.keys(env).length) await k.setEnv(env).catch(() => undefined);
        await k.reseed().catch(() => undefined);
      }),
    );
  }
}
