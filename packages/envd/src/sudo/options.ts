/**
 * What `sudo …` or `su …` asks for, parsed the way the real tools read their options: who to
 * run as, what to run, and which environment to keep. Only options that change what runs are
 * honoured; password-related ones (-n, -S, -k, -A) are accepted and ignored (there is no
 * password to ask for), and listing/validation (-l, -v) answer as NOPASSWD: ALL would.
 */
export type SudoRequest =
  | {
      kind: "run";
      /** Target account name. */
      user: string;
      /** argv to run; empty for an interactive shell of the target. */
      argv: string[];
      /** Run through the target's shell (`-s`, `-i`, `su`): argv is joined into one line. */
      shell: boolean;
      /** A login shell / environment (`-i`, `su -`). */
      login: boolean;
      /** Keep the caller's environment (`-E`, `su` without `-`). */
      preserveEnv: boolean | string[];
      /** Explicit shell (`su -s`). */
      shellPath?: string;
    }
  | { kind: "print"; text: string; code: number };

export class UsageError extends Error {}

const SUDO_VERSION = "Sudo version 1.9.13p3 (aenv: commands run by envd as root)\n";

export function parseSudo(args: string[], caller: string): SudoRequest {
  let user = "root";
  let shell = false;
  let login = false;
  let preserveEnv: boolean | string[] = false;
  let i = 0;
  const value = (flag: string): string => {
    const v = args[++i];
    if (v === undefined) throw new UsageError(`option requires an argument -- '${flag}'`);
    return v;
  };
  for (; i < args.length; i++) {
    const a = args[i] as string;
    if (a === "--") {
      i++;
      break;
    }
    if (!a.startsWith("-") || a === "-") break;
    if (a.startsWith("--")) {
      const [name, v] = a.slice(2).split("=", 2) as [string, string | undefined];
      if (name === "preserve-env") preserveEnv = v ? v.split(",") : true;
      else if (name === "user") user = v ?? value("u");
      else if (name === "login") login = true;
      else if (name === "shell") shell = true;
      else if (name === "set-home" || name === "non-interactive" || name === "stdin" || name === "reset-timestamp") {
        // no password, nothing to do
      } else if (name === "version") return { kind: "print", text: SUDO_VERSION, code: 0 };
      else if (name === "list") return list(caller);
      else if (name === "validate") return { kind: "print", text: "", code: 0 };
      else if (name === "help") return { kind: "print", text: usage(), code: 0 };
      else throw new UsageError(`unrecognized option '--${name}'`);
      continue;
    }
    // Clustered short options: -nE, -iu root
    for (let j = 1; j < a.length; j++) {
      const f = a[j] as string;
      const rest = a.slice(j + 1);
      const take = () => {
        if (rest) {
          j = a.length;
          return rest;
        }
        j = a.length;
        return value(f);
      };
      if (f === "u") user = take();
      else if (f === "g" || f === "p" || f === "C" || f === "T" || f === "r" || f === "t" || f === "U") {
        // group, prompt, fd limit, timeout, role, type, list-user: accepted, no effect here
        take();
      } else if (f === "h") return { kind: "print", text: usage(), code: 0 };
      else if (f === "E") preserveEnv = true;
      else if (f === "i") login = true;
      else if (f === "s") shell = true;
      else if (f === "H" || f === "n" || f === "S" || f === "k" || f === "K" || f === "A" || f === "P" || f === "b") {
        if ((f === "k" || f === "K") && i === args.length - 1 && a.length === 2)
          return { kind: "print", text: "", code: 0 };
      } else if (f === "V") return { kind: "print", text: SUDO_VERSION, code: 0 };
      else if (f === "v") return { kind: "print", text: "", code: 0 };
      else if (f === "l") return list(caller);
      else throw new UsageError(`invalid option -- '${f}'\n${usage()}`);
    }
  }
  const argv = args.slice(i);
  if (!argv.length && !shell && !login) throw new UsageError(usage());
  return { kind: "run", user, argv, shell: shell || login, login, preserveEnv };
}

export function parseSu(args: string[]): SudoRequest {
  let login = false;
  let command: string | undefined;
  let shellPath: string | undefined;
  let preserve = false;
  let user: string | undefined;
  const extra: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const value = () => {
      const v = args[++i];
      if (v === undefined) throw new UsageError(`option '${a}' requires an argument`);
      return v;
    };
    if (a === "-" || a === "-l" || a === "--login") login = true;
    else if (a === "-c" || a === "--command") command = value();
    else if (a.startsWith("--command=")) command = a.slice(10);
    else if (a === "-s" || a === "--shell") shellPath = value();
    else if (a === "-m" || a === "-p" || a === "--preserve-environment") preserve = true;
    else if (a === "-g" || a === "-G" || a === "--group" || a === "--supp-group") value();
    else if (a === "-f" || a === "-P" || a === "--pty") {
      // fast shell / pty: accepted
    } else if (a === "-h" || a === "--help")
      return { kind: "print", text: "Usage: su [options] [-] [<user> [<argument>...]]\n", code: 0 };
    else if (a.startsWith("-") && user === undefined)
      throw new UsageError(`invalid option -- '${a.replace(/^-+/, "")}'`);
    else if (user === undefined) user = a;
    else extra.push(a);
  }
  const argv = command !== undefined ? [command, ...extra] : extra;
  return {
    kind: "run",
    user: user ?? "root",
    argv,
    shell: true,
    login,
    preserveEnv: preserve || !login,
    ...(shellPath ? { shellPath } : {}),
  };
}

function list(caller: string): SudoRequest {
  return {
    kind: "print",
    text: `User ${caller} may run the following commands on this sandbox:\n    (ALL : ALL) NOPASSWD: ALL\n`,
    code: 0,
  };
}

function usage(): string {
  return "usage: sudo [-EHiknSs] [-u user] [--] command [arg ...]\n       sudo -i | -s [command]\n       sudo -l | -v | -V\n";
}
