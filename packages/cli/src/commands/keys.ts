import type { Command } from "commander";
import type { ApiKeyInfo, ApiKeyLimits } from "../api.js";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";
import { relativeTime } from "../output.js";

function limitsText(l: ApiKeyLimits | undefined): string {
  if (!l) return "";
  const parts = [
    l.maxSandboxes !== undefined ? `${l.maxSandboxes} sandboxes` : "",
    l.createsPerSecond !== undefined ? `${l.createsPerSecond} creates/s` : "",
    l.callsPerWindow !== undefined ? `${l.callsPerWindow} calls/${l.windowSeconds ?? 30}s` : "",
  ];
  return parts.filter(Boolean).join(", ");
}

export const KEY_COLUMNS = [
  { header: "ID", get: (k: ApiKeyInfo) => k.id },
  { header: "NAME", get: (k: ApiKeyInfo) => k.name },
  { header: "KEY", get: (k: ApiKeyInfo) => `${k.mask.prefix}${k.mask.maskedValuePrefix}…${k.mask.maskedValueSuffix}` },
  { header: "LIMITS", get: (k: ApiKeyInfo) => (k.admin ? "operator" : limitsText(k.limits)) },
  { header: "LAST USED", get: (k: ApiKeyInfo) => (k.lastUsed ? relativeTime(k.lastUsed) : "") },
];

interface LimitFlags {
  maxSandboxes?: string;
  createsPerSecond?: string;
  callsPerWindow?: string;
  window?: string;
}

/** The limits the flags give; undefined when none is given. */
function limitsOf(o: LimitFlags): ApiKeyLimits | undefined {
  const num = (v: string | undefined, flag: string) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new CliError(`${flag} must be a positive number`, 2);
    return n;
  };
  const l: ApiKeyLimits = {};
  const max = num(o.maxSandboxes, "--max-sandboxes");
  const rate = num(o.createsPerSecond, "--creates-per-second");
  const calls = num(o.callsPerWindow, "--calls-per-window");
  const window = num(o.window, "--window");
  if (max !== undefined) l.maxSandboxes = max;
  if (rate !== undefined) l.createsPerSecond = rate;
  if (calls !== undefined) l.callsPerWindow = calls;
  if (window !== undefined) l.windowSeconds = window;
  return Object.keys(l).length ? l : undefined;
}

const limitOptions = (c: Command) =>
  c
    .option("--max-sandboxes <n>", "sandboxes it may run at once")
    .option("--creates-per-second <n>", "sandboxes it may create a second")
    .option("--calls-per-window <n>", "API calls it may make a window")
    .option("--window <seconds>", "the calls' window (default 30)");

export function registerKeys(program: Command, ctx: Ctx): void {
  const keys = program
    .command("keys")
    .description("API keys: each sees only its own sandboxes, within its limits (the operator's key only)")
    .addHelpText(
      "after",
      examples(
        "aenv keys create trainer-a --max-sandboxes 100 --creates-per-second 5",
        "aenv keys ls",
        "aenv keys limit <id> --max-sandboxes 200",
        "aenv keys rm <id>",
      ),
    );
  limitOptions(
    keys.command("create").description("make a key (shown once)").argument("<name>", "a name for it"),
  ).action(async (name: string, o: LimitFlags) => {
    const k = await ctx.api().createApiKey(name, limitsOf(o));
    ctx.out().item(k, `${k.key}\n(id ${k.id}; this is the only time the key is shown)`);
  });
  keys
    .command("ls")
    .alias("list")
    .description("list keys (never their values)")
    .action(async () => ctx.out().list(await ctx.api().apiKeys(), KEY_COLUMNS));
  limitOptions(
    keys.command("limit").description("set a key's limits (none given: no limits)").argument("<id>", "key ID"),
  ).action(async (id: string, o: LimitFlags) => {
    const k = await ctx.api().updateApiKey(id, { limits: limitsOf(o) ?? null });
    ctx.out().item(k, `${k.id}: ${limitsText(k.limits) || "no limits"}`);
  });
  keys
    .command("rm")
    .alias("revoke")
    .description("revoke a key: it opens nothing from now on (its sandboxes keep running)")
    .argument("<id>", "key ID")
    .action(async (id: string) => {
      await ctx.api().revokeApiKey(id);
      ctx.out().item({ id, result: "revoked" }, `${id} revoked`);
    });
}
