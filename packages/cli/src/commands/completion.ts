import type { Command } from "commander";
import type { Api } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";

/** Commands whose first argument is a sandbox ID / a template name (for dynamic completion). */
export const SANDBOX_ARG = [
  "connect",
  "cn",
  "exec",
  "run-code",
  "upload",
  "download",
  "pause",
  "resume",
  "rm",
  "kill",
  "timeout",
  "fork",
];
export const TEMPLATE_ARG = ["start"];
/** `aenv template <sub> NAME` and `aenv snapshot create ID`. */
const TEMPLATE_SUB = ["rm", "watch"];

/** IDs for the shell scripts: one per line; nothing at all on any error, and quick. */
export async function completeValues(api: Api, kind: string): Promise<string[]> {
  try {
    if (kind === "sandboxes")
      return (await api.request<Array<{ sandboxID: string }>>("GET", "/v2/sandboxes", undefined, 2000)).map(
        (s) => s.sandboxID,
      );
    if (kind === "templates")
      return (
        await api.request<Array<{ templateID: string; names?: string[] }>>("GET", "/templates", undefined, 2000)
      ).map((t) => t.names?.[0] ?? t.templateID);
  } catch {
    // Completion must never print errors into the user's command line.
  }
  return [];
}

interface Tree {
  name: string;
  subs: string[];
  options: string[];
}

const visible = (program: Command) => program.commands.filter((c) => !c.name().startsWith("__"));

function tree(program: Command): Tree[] {
  return visible(program).map((c) => ({
    name: c.name(),
    subs: c.commands.map((s) => s.name()),
    options: c.options.map((o) => o.long).filter((x): x is string => !!x),
  }));
}

export function completionScript(shell: string, program: Command): string {
  const t = tree(program);
  const top = t.flatMap((c) => [c.name, ...program.commands.find((x) => x.name() === c.name)!.aliases()]);
  if (shell === "bash") {
    const cases = t
      .filter((c) => c.subs.length || c.options.length)
      .map((c) => `    ${c.name}) words="${[...c.subs, ...c.options, "--help"].join(" ")}" ;;`)
      .join("\n");
    return `# aenv bash completion; load with: source <(aenv completion bash)
_aenv() {
  local cur=\${COMP_WORDS[COMP_CWORD]} words
  if [ "$COMP_CWORD" -eq 1 ]; then
    words="${top.join(" ")} --help --version --output"
  else
    case "\${COMP_WORDS[1]}" in
${cases}
    *) words="--help" ;;
    esac
    if [[ $cur != -* ]]; then
      case "\${COMP_WORDS[1]}:$COMP_CWORD" in
        ${SANDBOX_ARG.map((c) => `${c}:2`).join("|")}|snapshot:3) words="$words $(aenv __complete sandboxes 2>/dev/null)" ;;
        ${TEMPLATE_ARG.map((c) => `${c}:2`).join("|")}) words="$words $(aenv __complete templates 2>/dev/null)" ;;
        template:3) case "\${COMP_WORDS[2]}" in ${TEMPLATE_SUB.join("|")}) words="$words $(aenv __complete templates 2>/dev/null)" ;; esac ;;
      esac
    fi
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _aenv aenv
`;
  }
  if (shell === "zsh") {
    const cases = t
      .filter((c) => c.subs.length || c.options.length)
      .map((c) => `    ${c.name}) compadd -- ${[...c.subs, ...c.options, "--help"].join(" ")} ;;`)
      .join("\n");
    return `#compdef aenv
# aenv zsh completion; load with: source <(aenv completion zsh)
_aenv() {
  if (( CURRENT == 2 )); then
    compadd -- ${top.join(" ")} --help --version --output
  else
    case "$words[2]" in
${cases}
    *) _files ;;
    esac
    case "$words[2]:$CURRENT" in
      ${SANDBOX_ARG.map((c) => `${c}:3`).join("|")}|snapshot:4) compadd -- \${(f)"$(aenv __complete sandboxes 2>/dev/null)"} ;;
      ${TEMPLATE_ARG.map((c) => `${c}:3`).join("|")}) compadd -- \${(f)"$(aenv __complete templates 2>/dev/null)"} ;;
      template:4) [[ $words[3] == (${TEMPLATE_SUB.join("|")}) ]] && compadd -- \${(f)"$(aenv __complete templates 2>/dev/null)"} ;;
    esac
  fi
}
compdef _aenv aenv
`;
  }
  if (shell === "fish") {
    const lines = ["# aenv fish completion; load with: aenv completion fish | source", "complete -c aenv -f"];
    const seen = (cmds: string[]) => `__fish_seen_subcommand_from ${cmds.join(" ")}`;
    lines.push(`complete -c aenv -n '${seen(SANDBOX_ARG)}' -a '(aenv __complete sandboxes 2>/dev/null)'`);
    lines.push(`complete -c aenv -n '${seen(TEMPLATE_ARG)}' -a '(aenv __complete templates 2>/dev/null)'`);
    lines.push(
      `complete -c aenv -n '${seen(["template"])}; and ${seen(TEMPLATE_SUB)}' -a '(aenv __complete templates 2>/dev/null)'`,
    );
    lines.push(
      `complete -c aenv -n '${seen(["snapshot"])}; and ${seen(["create"])}' -a '(aenv __complete sandboxes 2>/dev/null)'`,
    );
    for (const c of visible(program)) {
      lines.push(
        `complete -c aenv -n __fish_use_subcommand -a ${c.name()} -d '${c.description().replace(/'/g, "\\'")}'`,
      );
      for (const s of c.commands)
        lines.push(
          `complete -c aenv -n '__fish_seen_subcommand_from ${c.name()}' -a ${s.name()} -d '${s.description().replace(/'/g, "\\'")}'`,
        );
      for (const o of c.options)
        if (o.long) lines.push(`complete -c aenv -n '__fish_seen_subcommand_from ${c.name()}' -l ${o.long.slice(2)}`);
    }
    return `${lines.join("\n")}\n`;
  }
  throw new CliError(`unknown shell '${shell}': expected bash, zsh or fish`);
}

export function registerCompletion(program: Command, ctx: Ctx): void {
  program
    .command("__complete", { hidden: true })
    .argument("<kind>", "sandboxes or templates")
    .action(async (kind: string) => {
      let values: string[] = [];
      try {
        values = await completeValues(ctx.api(), kind);
      } catch {
        // no credentials: no values
      }
      if (values.length) process.stdout.write(`${values.join("\n")}\n`);
    });

  program
    .command("completion")
    .description("print a shell completion script")
    .argument("<shell>", "bash, zsh or fish")
    .addHelpText(
      "after",
      examples("source <(aenv completion bash)", "aenv completion fish > ~/.config/fish/completions/aenv.fish"),
    )
    .action((shell: string) => {
      process.stdout.write(completionScript(shell, program));
    });
}
