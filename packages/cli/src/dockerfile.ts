import { CliError } from "./errors.js";
import { shellQuote } from "./parse.js";

/**
 * A Dockerfile-like spec, parsed here rather than by the SDK's `fromDockerfile`, which splits
 * `ENV K="a b"` at the space, drops `ENV K a b`, passes `RUN ["exec","form"]` through as text,
 * ignores `COPY --chmod`, warns-and-skips HEALTHCHECK and silently accepts multi-line
 * heredocs and `COPY --from`. The result maps 1:1 onto the SDK's builder calls.
 */
export type DockerStep =
  | { kind: "run"; line: number; cmd: string }
  | { kind: "env"; line: number; vars: Record<string, string> }
  | { kind: "workdir"; line: number; path: string }
  | { kind: "user"; line: number; user: string }
  | { kind: "copy"; line: number; src: string; dest: string; user?: string; mode?: number };

export interface DockerSpec {
  from: string;
  steps: DockerStep[];
  startCmd?: string;
  readyCmd?: string;
  /** Instructions accepted but without effect, one line each. */
  notes: string[];
}

interface Instruction {
  line: number;
  keyword: string;
  rest: string;
}

/** Logical instructions: comments dropped, `\`-continued lines joined, with their first line number. */
export function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split(/\r?\n/);
  let buf = "";
  let start = 0;
  for (const [i, raw] of lines.entries()) {
    const trimmed = raw.trim();
    if (trimmed.startsWith("#") || (!buf && !trimmed)) continue;
    if (!buf) start = i + 1;
    if (trimmed.endsWith("\\")) {
      buf += `${raw.replace(/\\\s*$/, "")}`;
      continue;
    }
    buf += raw;
    const m = /^\s*([A-Za-z]+)\s*(.*)$/s.exec(buf);
    if (!m) throw new CliError(`line ${start}: cannot parse '${buf.trim()}'`);
    out.push({ line: start, keyword: (m[1] as string).toUpperCase(), rest: (m[2] as string).trim() });
    buf = "";
  }
  if (buf.trim()) throw new CliError(`line ${start}: the file ends inside a continued line`);
  return out;
}

/** Shell words with Docker's quoting: "…" and '…' group, backslash escapes. */
export function words(s: string): string[] {
  const out: string[] = [];
  let cur = "";
  let has = false;
  let q: '"' | "'" | undefined;
  for (let i = 0; i < s.length; i++) {
    const c = s[i] as string;
    if (q) {
      if (c === q) q = undefined;
      else if (c === "\\" && q === '"' && i + 1 < s.length) cur += s[++i];
      else cur += c;
    } else if (c === '"' || c === "'") {
      q = c;
      has = true;
    } else if (c === "\\" && i + 1 < s.length) {
      cur += s[++i];
      has = true;
    } else if (/\s/.test(c)) {
      if (has || cur) out.push(cur);
      cur = "";
      has = false;
    } else cur += c;
  }
  if (q) throw new Error("unterminated quote");
  if (has || cur) out.push(cur);
  return out;
}

/** `["a", "b c"]` → ["a", "b c"]; anything that is not a JSON string array → undefined (shell form). */
function execForm(rest: string): string[] | undefined {
  if (!rest.startsWith("[")) return undefined;
  try {
    const v: unknown = JSON.parse(rest);
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
  } catch {
    // Docker falls back to shell form too.
  }
  return undefined;
}

/** `--name=value` flags at the start of an instruction's arguments. */
function flags(rest: string): { flags: Map<string, string>; rest: string } {
  const f = new Map<string, string>();
  let r = rest;
  for (let m = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(r); m; m = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(r)) {
    f.set(m[1] as string, m[2] ?? "");
    r = r.slice(m[0].length);
  }
  return { flags: f, rest: r };
}

const IGNORED = new Set(["EXPOSE", "VOLUME", "LABEL", "MAINTAINER", "STOPSIGNAL"]);

export function parseDockerfile(text: string): DockerSpec {
  const steps: DockerStep[] = [];
  const notes: string[] = [];
  const vars = new Map<string, string>();
  let from: string | undefined;
  let cmd: { exec?: string[]; shell?: string } | undefined;
  let entry: { exec?: string[]; shell?: string } | undefined;
  let readyCmd: string | undefined;

  for (const ins of instructions(text)) {
    const fail = (why: string): never => {
      throw new CliError(`line ${ins.line}: ${ins.keyword}: ${why}`);
    };
    const split = (s: string) => {
      try {
        return words(s);
      } catch (e) {
        return fail((e as Error).message);
      }
    };
    // Docker substitutes earlier ENV/ARG values; unknown names (say the image's $PATH) stay as written.
    const expand = (s: string) =>
      s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, a?: string, b?: string) => {
        const v = vars.get((a ?? b) as string);
        if (v === undefined) notes.push(`line ${ins.line}: ${m} is not set by this file; kept as written`);
        return v ?? m;
      });
    const kw = ins.keyword;
    if (kw !== "FROM" && kw !== "ARG" && from === undefined) fail("comes before FROM");
    if (/^<<-?\s*["']?[A-Za-z_]/.test(flags(ins.rest).rest))
      fail("heredocs are not supported; use RUN with && or a COPYed script");
    switch (kw) {
      case "FROM": {
        if (from !== undefined) fail("multi-stage builds are not supported (one FROM only)");
        const img = split(flags(ins.rest).rest)[0];
        if (!img) fail("needs an image");
        if (img === "scratch") fail("'scratch' has no shell to run build steps; start from an image with /bin/sh");
        if (img?.includes("$")) fail("variables in FROM are not supported");
        from = img;
        break;
      }
      case "RUN": {
        const f = flags(ins.rest);
        if (f.flags.size) fail(`--${[...f.flags.keys()][0]} is not supported`);
        const exec = execForm(f.rest);
        const c = exec ? exec.map(shellQuote).join(" ") : f.rest;
        if (!c.trim()) fail("needs a command");
        steps.push({ kind: "run", line: ins.line, cmd: c });
        break;
      }
      case "ENV":
      case "ARG": {
        const w = split(ins.rest);
        const set: Record<string, string> = {};
        if (kw === "ENV" && w[0] && !w[0].includes("=")) {
          // Legacy `ENV KEY value with spaces`.
          const m = /^(\S+)\s+(.*)$/s.exec(ins.rest);
          if (!m) fail("needs KEY=VALUE");
          set[w[0]] = expand(split(m?.[2] ?? "").join(" "));
        } else {
          for (const x of w) {
            const i = x.indexOf("=");
            if (i === 0) fail(`invalid '${x}'`);
            if (i < 0) {
              if (kw === "ENV") fail(`'${x}' needs a value (KEY=VALUE)`);
              continue; // ARG without a default: nothing to set
            }
            set[x.slice(0, i)] = expand(x.slice(i + 1));
          }
        }
        for (const [k, v] of Object.entries(set)) vars.set(k, v);
        // ARGs before FROM only parameterise FROM (not supported): nothing to run.
        if (from !== undefined && Object.keys(set).length) steps.push({ kind: "env", line: ins.line, vars: set });
        break;
      }
      case "WORKDIR": {
        const p = expand(split(ins.rest)[0] ?? "");
        if (!p) fail("needs a path");
        steps.push({ kind: "workdir", line: ins.line, path: p });
        break;
      }
      case "USER": {
        const u = expand(split(ins.rest)[0] ?? "").split(":")[0] ?? "";
        if (!u) fail("needs a user");
        steps.push({ kind: "user", line: ins.line, user: u });
        break;
      }
      case "COPY":
      case "ADD": {
        const f = flags(ins.rest);
        let user: string | undefined;
        let mode: number | undefined;
        for (const [k, v] of f.flags) {
          if (k === "chown") user = v.split(":")[0] || undefined;
          else if (k === "chmod") {
            if (!/^[0-7]{3,4}$/.test(v)) fail(`--chmod=${v}: only octal modes are supported`);
            mode = Number.parseInt(v, 8);
          } else if (k === "from") fail("--from (multi-stage) is not supported");
          else if (k !== "link") fail(`--${k} is not supported`);
        }
        const args = (execForm(f.rest) ?? split(f.rest)).map(expand);
        if (args.length < 2) fail("needs a source and a destination");
        const dest = args[args.length - 1] as string;
        for (const src of args.slice(0, -1)) {
          if (kw === "ADD" && /^[a-z]+:\/\//i.test(src))
            fail(`URL sources are not supported (${src}); RUN wget/curl instead`);
          if (kw === "ADD" && /\.(tar|tgz|tar\.\w+)$/.test(src))
            fail(`archives are not unpacked (${src}); COPY it and RUN tar`);
          steps.push({ kind: "copy", line: ins.line, src, dest, ...(user ? { user } : {}), ...(mode ? { mode } : {}) });
        }
        break;
      }
      case "CMD":
      case "ENTRYPOINT": {
        const exec = execForm(ins.rest);
        const v = exec ? { exec } : { shell: ins.rest };
        if (kw === "CMD") cmd = v;
        else entry = v;
        break;
      }
      case "HEALTHCHECK": {
        const f = flags(ins.rest);
        if (/^NONE$/i.test(f.rest)) {
          readyCmd = undefined;
          break;
        }
        const m = /^CMD\s+(.*)$/is.exec(f.rest);
        if (!m) fail("expected HEALTHCHECK [OPTIONS] CMD command");
        const exec = execForm(m?.[1] ?? "");
        readyCmd = exec
          ? exec[0] === "CMD-SHELL"
            ? exec.slice(1).join(" ")
            : exec.map(shellQuote).join(" ")
          : (m?.[1] ?? "");
        if (f.flags.size) notes.push(`line ${ins.line}: HEALTHCHECK options are ignored; it becomes the ready command`);
        break;
      }
      default:
        if (IGNORED.has(kw)) notes.push(`line ${ins.line}: ${kw} has no effect in aenv and is ignored`);
        else
          fail(
            "is not supported (supported: FROM, RUN, ENV, ARG, WORKDIR, USER, COPY, ADD, CMD, ENTRYPOINT, HEALTHCHECK)",
          );
    }
  }
  if (from === undefined) throw new CliError("no FROM instruction");
  const startCmd = startCommand(entry, cmd);
  return { from, steps, notes, ...(startCmd ? { startCmd } : {}), ...(readyCmd ? { readyCmd } : {}) };
}

type CmdForm = { exec?: string[]; shell?: string } | undefined;

/** Docker's ENTRYPOINT/CMD combination as one shell command line. */
export function startCommand(entry: CmdForm, cmd: CmdForm): string | undefined {
  const line = (f: CmdForm) => (f?.exec ? f.exec.map(shellQuote).join(" ") : (f?.shell ?? ""));
  // A shell-form ENTRYPOINT ignores CMD; an exec-form one takes CMD as arguments.
  if (entry?.shell !== undefined) return entry.shell || undefined;
  const parts = [line(entry), line(cmd)].filter(Boolean);
  return parts.length ? parts.join(" ") : undefined;
}
