import type { Command } from "commander";
import { examples } from "../context.js";
import { CliError } from "../errors.js";

interface Tree {
  name: string;
  subs: string[];
  options: string[];
}

function tree(program: Command): Tree[] {
  return program.commands.map((c) => ({
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
  fi
}
compdef _aenv aenv
`;
  }
  if (shell === "fish") {
    const lines = ["# aenv fish completion; load with: aenv completion fish | source", "complete -c aenv -f"];
    for (const c of program.commands) {
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

export function registerCompletion(program: Command): void {
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
